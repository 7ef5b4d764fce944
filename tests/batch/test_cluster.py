"""Which Dask scheduler addresses the grader sends work to: encrypted ones, or plain ones on
this machine's loopback only, unless the staff accept one explicitly."""
import pytest

from grading_helpers import non_loopback_address
from grader.batch.dask_cluster import checked_address, is_loopback
from grader.errors import SubmissionError
from grader.settings import settings_from


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:8786", "tcp://localhost:8786", "tcp://[::1]:8786",
                                     "127.0.0.1:8786", "inproc://192.0.2.9/1/1", "tls://192.0.2.9:8786"])
def test_loopback_and_encrypted_addresses_are_accepted(address):
    assert checked_address(address, settings_from({})) == address


@pytest.mark.parametrize("form", ["tcp://{ip}:8786", "{ip}:8786", "ws://{ip}:8786", "TCP://{ip}:8786",
                                  "tcp://no-such-host.invalid:8786", "tcp://0.0.0.0:8786"])
@pytest.mark.slow
def test_an_unencrypted_address_elsewhere_is_refused_in_one_line(form):
    address = form.format(ip=non_loopback_address())
    with pytest.raises(SubmissionError, match="not encrypted and not this machine's loopback") as refused:
        checked_address(address, settings_from({}))
    assert "\n" not in str(refused.value) and "--insecure-scheduler" in str(refused.value)
    assert checked_address(address, settings_from({"insecure_scheduler": True})) == address


def test_the_tls_files_go_together_with_an_encrypted_address(tmp_path):
    for name in ("ca.pem", "cert.pem", "key.pem"):
        (tmp_path / name).write_text("-")
    files = {"tls_ca_file": tmp_path / "ca.pem", "tls_cert": tmp_path / "cert.pem", "tls_key": tmp_path / "key.pem"}
    assert checked_address("tls://head:8786", settings_from(files)) == "tls://head:8786"
    with pytest.raises(SubmissionError, match="go together"):
        checked_address("tls://head:8786", settings_from({"tls_ca_file": files["tls_ca_file"]}))
    with pytest.raises(SubmissionError, match="for an encrypted scheduler address"):
        checked_address("tcp://127.0.0.1:8786", settings_from(files))
    with pytest.raises(SubmissionError, match="no such file"):
        checked_address("tls://head:8786", settings_from({**files, "tls_key": tmp_path / "missing.pem"}))


def test_a_name_is_loopback_only_when_all_it_stands_for_is():
    assert is_loopback("localhost") and is_loopback("127.0.0.2") and is_loopback("::1")
    assert not is_loopback("") and not is_loopback("no-such-host.invalid") and not is_loopback("192.0.2.9")


@pytest.mark.parametrize("address", [
    "tcp://10.255.255.1:8786@127.0.0.1",   # a URL parser's host is 127.0.0.1; Dask's is 10.255.255.1
    "tcp://user@127.0.0.1:8786",           # a URL parser's host is 127.0.0.1; Dask's is "user@127.0.0.1"
    "tcp://127.0.0.1#@10.0.0.1:8786",      # a URL parser stops at "#"; Dask does not
    "tcp://127.0.0.1/x:8786",
    "tcp://[::1]x:8786",
    "tcp://127.0.0.1:87a6",
])
def test_an_address_read_otherwise_by_dask_is_never_taken_for_loopback(address):
    """The host is read as Dask reads it (the part before the last colon, or in brackets), and
    what is not plainly a name or an address is refused: a plain TCP address is sent work only
    when Dask, too, would connect to this machine's loopback."""
    with pytest.raises(SubmissionError, match="not encrypted and not this machine's loopback"):
        checked_address(address, settings_from({}))
