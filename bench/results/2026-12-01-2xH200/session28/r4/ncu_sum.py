import csv, sys, collections
rows = []
with open(sys.argv[1]) as f:
    lines = [l for l in f if l.startswith('"')]
r = csv.DictReader(lines)
for x in r:
    if x.get('Metric Name') != 'gpu__time_duration.sum': continue
    rows.append((int(x['ID']), x['Kernel Name'][:60], float(x['Metric Value'].replace(',', ''))))
print(len(rows), "kernels")
# the launch sequence: print the last ~third (one iteration's worth) in order, and per-name totals
by = collections.OrderedDict()
for i, n, d in rows:
    by.setdefault(n, []).append(d)
tot = sum(d for _, _, d in rows)
print("%-60s %5s %10s %10s" % ("kernel", "calls", "median us", "sum us"))
for n, v in sorted(by.items(), key=lambda kv: -sum(kv[1])):
    s = sorted(v)
    print("%-60s %5d %10.1f %10.1f" % (n, len(v), s[len(s)//2] / 1e3, sum(v) / 1e3))
print("total us", tot / 1e3)
