"""What a reader sees of a result, and only that: visibility decided once (view), then the
terminal (terminal), the HTML report (html, heatmap_words) and text made safe to print (printable).
"""
