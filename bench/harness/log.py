"""Progress lines on stderr, stamped with seconds since the harness started."""
import sys
import time

_T0 = time.monotonic()


def log(msg):
    print(f"[bench {time.monotonic() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)
