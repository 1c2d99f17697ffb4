# pytest setup for mutwo's Python tests: makes `mutwo` (python/) and the test
# models (this directory) importable without PYTHONPATH.
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
for p in (os.path.join(HERE, "..", "..", "python"), HERE):
    p = os.path.normpath(p)
    if p not in sys.path:
        sys.path.insert(0, p)
