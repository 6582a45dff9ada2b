"""The Python HdrHistogram log reader (PyPI: hdrhistogram) on a podstuck
latency.hlog: prints "<tag> <calls>" per tag."""
import sys
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
reader = HistogramLogReader(sys.argv[1], HdrHistogram(1, 3600 * 10**9, 3))
counts = {}
while True:
    h = reader.get_next_interval_histogram()
    if h is None:
        break
    tag = h.get_tag() or ""
    counts[tag] = counts.get(tag, 0) + h.get_total_count()
for tag in sorted(counts):
    print(tag, counts[tag])
