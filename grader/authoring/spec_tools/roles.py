"""Which roles a parameter may have, proposed from its name: the data `grader spec infer`
starts from. Nothing here decides: every proposal is tried on the solution itself.

A name is compared normalised (lower case, without underscores: W_q, Wq and w_q are one
name). Each row is a pattern matched against the whole name and the roles it proposes, in
order of preference. `{which}` in a role is the q, k or v the name spells (query, key, value
count too); a trailing `s` (Wqs) proposes one matrix per head, a trailing digit (omega_q1)
that head's own matrix; `{sequence}` the sequence that q, k or v is projected from (x,
key_tokens, value_tokens). A role the grader does not know yet (key padding, say) may be
proposed all the same: the candidate is refused when its convention is parsed, and the output
says why, so a new role needs one row here and nothing else.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

WHICH = r"(?P<which>q|query|queries|k|key|keys|v|value|values)"
PLURAL = r"(?P<plural>s)?"
HEAD = r"(?P<head>[1-9])?"
WEIGHT = r"(w|omega|weight|weights|theta|proj|projection)"
BIAS = r"(b|beta|bias|biases)"

# A backward pass's cache, a dict the forward filled: its keys for the forward's attention
# weights, which say "weights" only there (a key `p` of a dict of weights says nothing).
CACHE = r"cache|cached|saved|forwardcache|fwdcache"
CACHE_KEYS = (r"p|a|probs|probabilities|weights|attn|attention|attnweights|attentionweights|alpha|softmax"
              r"|softmaxout|attnprobs", "weights")

NAME_ROLES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"x|xs|input|inputs|token|tokens|embedding|embeddings|emb|seq|sequence|hiddenstates?|xin", ("x", "scores")),
    (r"scores?|logits?|z|a|arr|array|mat|matrix|data|datain|itemsin|s|e|attnscores|attentionscores", ("scores",)),
    (r"memory|mem|encoderout|encoderoutputs?|enc|encoded|encoder|context|ctx|y|source|src|kv|xkv|crossinput"
     r"|encoderhiddenstates?|keyvalues?|keysvalues|kvinputs?|kvin|kvseq|kvsequence", ("memory",)),
    # Q, K, V (or query, key, value) are given as projected, or are the three sequences the
    # function projects itself (`forward(query, key, value)` beside W_q, W_k, W_v): `{sequence}`.
    (WHICH, ("{which}", "{sequence}")),
    (WHICH + r"(in|input|inputs|tokens|seq|sequence|x|embeds?|embeddings?)", ("{sequence}", "{which}")),
    (r"x" + WHICH, ("{sequence}", "{which}")),
    (WEIGHT + WHICH + PLURAL + HEAD, ("w{which}",)),
    (WHICH + r"(w|weight|weights|proj|projection)" + PLURAL, ("w{which}",)),
    (BIAS + WHICH + PLURAL + HEAD, ("b{which}",)),
    (WHICH + r"(b|bias)" + PLURAL, ("b{which}",)),
    (WHICH + r"proj(w|weight)", ("w{which}",)),
    (WHICH + r"proj(b|bias)", ("b{which}",)),
    (r"(w|weight|weights|omega)?qkv(w|weight|weights)?|inprojweight|wattn|cattnweight", ("wqkv",)),
    (BIAS + r"qkv|qkv(b|bias)|inprojbias|cattnbias", ("bqkv",)),
    (WEIGHT + r"(o|out|output|c)" + HEAD + r"|outproj(weight)?|(o|out)(w|weight|proj)", ("wo",)),
    (BIAS + r"(o|out|output|c)|outprojbias|(o|out)(b|bias)", ("bo",)),
    (r"h|nh|nheads?|numheads?|heads|headcount|numattentionheads", ("n_heads",)),
    # A module's sizes, which only its constructor takes.
    (r"dmodel|d|dim|embeddim|embedsize|embeddingdim|hiddensize|hiddendim|modeldim|inputdim|din|nembd|nembed",
     ("d_model",)),
    (r"dk|headdim|dhead|headsize|dkey|kdim", ("d_k",)),
    (r"mask|masks|m|attnmask|attentionmask", ("mask",)),
    (r"keypaddingmask|paddingmask|keymask|srckeypaddingmask", ("key_padding",)),
    (r"causal|iscausal|usecausal|causalmask|autoregressive", ("causal",)),
    (r"scale|scaled|usescale|usescaling|scaling|doscale|doscaling", ("scale",)),
    # A backward pass's upstream gradient: the loss's gradient with respect to the output.
    (r"do|dout|doutput|doutputs|dy|dz|dattn|dattnout|dattention|dcontext|dctx|gradout|gradoutput|gradoutputs"
     r"|grad|grads|gout|gradattn|upstream|upstreamgrad|upstreamgradient|dlossdout|dldo|dldout|dldy|dldz|delta"
     r"|outgrad|outputgrad|outputgradient|dupstream", ("d_output",)),
    # Additive (Bahdanau) attention, tried after the readings above: the score network's
    # weights (W1 and W2, Bahdanau's W_a and U_a, a dot-product course's W_q and W_k given Q and
    # K themselves), its vector (v, v_a, w_v), one weight on the concatenation [q; k] (W, W_a);
    # the keys that are the values too (an encoder's states), and one decoder state, the query.
    (WEIGHT + r"(q|query|queries|1|a|dec|decoder)|ws|ua?q", ("score_wq",)),
    (WEIGHT + r"(k|key|keys|2|enc|encoder)|wh|ua?|uk|uh", ("score_wk",)),
    (r"v|va|vt|vw|wv|vatt|vattn|vector|scorev|scorevector|attnv|attentionv|wscore|vscore", ("score_v",)),
    (r"values|keys|kv|keysvalues|keyvalues|annotations|encoderstates|encoderoutputs?|encoderhiddenstates?|encoded"
     r"|enc|encout|encoutputs?|memory|mem|hs|h|hiddenstates?|states|context|ctx|source|src", ("kv",)),
    (r"state|s|st|sprev|ht|hprev|decoderstate|decoderhidden|dechidden|hidden|prevstate|decoderhiddenstate"
     r"|querystate|query|q", ("q",)),
    # A transformer block's parts: its layer norms' scale and shift (one on its own, or a block's
    # first and second), and its feed-forward network's two layers (W1 also reads as additive
    # attention's, above: the candidates decide).
    (r"gamma|g|gain|lngamma|lnweight|lng|lnscale|normweight|normgamma", ("ln_gamma",)),
    (r"beta|lnbeta|lnbias|lnb|lnshift|normbias|normbeta", ("ln_beta",)),
    (r"(gamma|g|ln|ln_?g|lngamma|norm|normgamma)(1|attn)(gamma|g|weight)?", ("ln1_gamma",)),
    (r"(beta|ln|lnbeta|lnb|norm|normbeta)(1|attn)(beta|b|bias)?", ("ln1_beta",)),
    (r"(gamma|g|ln|ln_?g|lngamma|norm|normgamma)(2|ffn|ff|mlp)(gamma|g|weight)?", ("ln2_gamma",)),
    (r"(beta|ln|lnbeta|lnb|norm|normbeta)(2|ffn|ff|mlp)(beta|b|bias)?", ("ln2_beta",)),
    (r"w1|wff1|wfc|wfc1|fc1w|wup|wi|win|ffw1|w_?ff_?in|linear1weight|fc1weight", ("ff_w1",)),
    (r"b1|bff1|bfc|bfc1|fc1b|bup|bi|ffb1|linear1bias|fc1bias", ("ff_b1",)),
    (r"w2|wff2|wfc2|fc2w|wdown|wout2|ffw2|linear2weight|fc2weight", ("ff_w2",)),
    (r"b2|bff2|bfc2|fc2b|bdown|ffb2|linear2bias|fc2bias", ("ff_b2",)),
    # A backward pass's input: the forward's attention weights, by a name no other role has
    # (a cache's own keys, P say, are read by CACHE_KEYS).
    (r"probs|probabilities|attnweights|attentionweights|attnprobs|attentionprobs|softmaxout|softmaxoutput",
     ("weights",)),
    # A parameter holding weights, a dict or an object (what is read from it says which:
    # held.py): its keys' or attributes' own names say their roles (key_role).
    (r"params|parameters|weights|w|p|theta|state|statedict|paramdict|layer|module|projections"
     r"|cattn|cproj|inproj|outproj|oproj|qkvproj|attn|ln[12f]?|norm[12]?|mlp|ffn|ff|feedforward"
     r"|" + CACHE, ("dict",)),
    # One weight on an additive score network's concatenation [q; k]: after the dict, so that
    # a dict's key `w` says nothing of its own.
    (r"w|wa|wconcat|wcat|wc|watt|wattention|wenergy|wscore|attnw", ("score_w",)),
)

# A layer's weight and bias passed as one dict or object, {"w": ..., "b": ...} or `c_attn.w`,
# whose keys say only "weight" and "bias": its own name says which layer (GPT-2's c_attn, the packed
# query, key and value projection, and c_proj, the output projection).
LAYER_DICTS = ((r"cattn|attn|inproj|qkvproj", {"weight": "wqkv", "bias": "bqkv"}),
               (r"cproj|outproj|oproj", {"weight": "wo", "bias": "bo"}))
LAYER_KEYS = {"w": "weight", "weight": "weight", "kernel": "weight", "b": "bias", "bias": "bias"}

ROLE_LETTER = {"query": "q", "queries": "q", "key": "k", "keys": "k", "value": "v", "values": "v"}
# The sequence each of q, k and v is projected from, as a role: the queries' is the tokens X.
SEQUENCE_ROLE = {"q": "x", "k": "key_tokens", "v": "value_tokens"}


@dataclass(frozen=True)
class Guess:
    role: str
    plural: bool = False           # one per head, in a list or along a heads axis
    head: int | None = None        # a fixed head's own matrix


def normalised(name: str) -> str:
    return name.lower().replace("_", "")


def guesses(name: str) -> list[Guess]:
    """The roles `name` proposes, best first; none when no row matches."""
    found: list[Guess] = []
    key = normalised(name)
    for pattern, roles in NAME_ROLES:
        match = re.fullmatch(pattern, key)
        if not match:
            continue
        groups = match.groupdict()
        which = groups.get("which")
        which = ROLE_LETTER.get(which, which) if which is not None else None
        head = groups.get("head")
        for role in roles:
            sequence = SEQUENCE_ROLE.get(which or "")
            guess = Guess(role.format(which=which, sequence=sequence), bool(groups.get("plural")),
                          int(head) if head else None)
            if guess not in found:
                found.append(guess)
    return found


# The same inside a block's feed-forward network (GPT-2's mlp: c_fc, then c_proj) and for a
# layer norm's dict ({"g": ..., "b": ...}): the holder's own name and the one holding it say which.
FFN_HOLDERS = r"mlp|ffn|ff|feedforward|fc|positionwise"
FFN_LAYERS = ((r"cfc|fc1|fcin|wi|up|lin1|linear1|layer1|dense1|w1", {"weight": "ff_w1", "bias": "ff_b1"}),
              (r"cproj|fc2|fcout|wo|down|lin2|linear2|layer2|dense2|w2|proj|out", {"weight": "ff_w2", "bias": "ff_b2"}))
NORM_DICTS = ((r"ln1|ln_1|norm1|lnattn|attnnorm|layernorm1|ln1attn", {"weight": "ln1_gamma", "bias": "ln1_beta"}),
              (r"ln2|ln_2|norm2|lnffn|lnmlp|ffnnorm|mlpnorm|layernorm2", {"weight": "ln2_gamma", "bias": "ln2_beta"}),
              (r"ln|norm|layernorm|lnf", {"weight": "ln_gamma", "bias": "ln_beta"}))
NORM_KEYS = {"g": "weight", "gamma": "weight", "weight": "weight", "w": "weight", "scale": "weight",
             "b": "bias", "beta": "bias", "bias": "bias", "shift": "bias"}


def key_role(dict_name: str, key: str, within: str = "") -> str | None:
    """The role of a key of a dict parameter: a layer's weight or bias by the dict's name
    (LAYER_DICTS; FFN_LAYERS where what holds it, `within`, is a feed-forward network; a
    layer norm's, NORM_DICTS), else what the key's own name proposes first; None when none says."""
    holder = normalised(dict_name)
    if re.fullmatch(CACHE, holder) and re.fullmatch(CACHE_KEYS[0], normalised(key)):
        return CACHE_KEYS[1]
    norm_part = NORM_KEYS.get(normalised(key))
    for pattern, roles in NORM_DICTS:
        if norm_part and re.fullmatch(pattern, holder):
            return roles[norm_part]
    part = LAYER_KEYS.get(normalised(key))
    if part and re.fullmatch(FFN_HOLDERS, normalised(within)):
        for pattern, roles in FFN_LAYERS:
            if re.fullmatch(pattern, holder):
                return roles[part]
    for pattern, roles in LAYER_DICTS:
        if part and re.fullmatch(pattern, normalised(dict_name)):
            return roles[part]
    found = [g for g in guesses(key)[:1] if g.role != "dict"]
    return found[0].role if found else None
