"""Sums a `mutwo profile` nodes.csv by op (and phase): where the step's time goes.
  python3 bench/ops_time.py DIR/nodes.csv [--top 25]
"""
import argparse, collections, csv

ap = argparse.ArgumentParser()
ap.add_argument("nodes_csv")
ap.add_argument("--top", type=int, default=25)
a = ap.parse_args()
by_op, count, total = collections.Counter(), collections.Counter(), 0.0
for row in csv.DictReader(open(a.nodes_csv)):
    key = f"{row['op']} ({row['phase']})"
    by_op[key] += float(row["ms"])
    count[key] += 1
    total += float(row["ms"])
print(f"# {a.nodes_csv}: {total:.2f} ms over {sum(count.values())} nodes")
for key, ms in by_op.most_common(a.top):
    print(f"{key:<40} {count[key]:>5} nodes {ms:>9.3f} ms {100 * ms / total:5.1f}%")
