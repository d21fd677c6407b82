import csv, gzip, sys
fn = sys.argv[1]
rows = list(csv.reader(gzip.open(fn, 'rt')))
hdr = rows[1]; data = rows[2:]
ix = {h: i for i, h in enumerate(hdr)}
stalls = [h for h in hdr if h.startswith('stall_') and 'Not Issued' not in h]
def num(s):
    try: return float(s.replace(',', ''))
    except: return 0.0
tot = {s: sum(num(r[ix[s]]) for r in data) for s in stalls}
allsamp = sum(num(r[ix['Warp Stall Sampling (All Samples)']]) for r in data)
print("total samples", allsamp)
for s, v in sorted(tot.items(), key=lambda x: -x[1])[:12]: print(f"  {s:24s} {v:10.0f} {100*v/allsamp:5.1f}%")
top = sorted(data, key=lambda r: -num(r[ix['Warp Stall Sampling (All Samples)']]))[:int(sys.argv[2]) if len(sys.argv) > 2 else 40]
for r in top:
    v = num(r[ix['Warp Stall Sampling (All Samples)']])
    reasons = sorted(((num(r[ix[s]]), s[6:]) for s in stalls), reverse=True)[:3]
    print(f"{r[ix['Address']]:>8s} {100*v/allsamp:5.2f}% exec {num(r[ix['Instructions Executed']]):9.0f}  {r[ix['Source']][:60]:60s} " + " ".join(f"{n}:{c:.0f}" for c, n in reasons if c > 0))
