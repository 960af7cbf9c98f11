import sys, statistics, collections
w=collections.defaultdict(list); c=collections.defaultdict(list); st={}
for line in open(sys.argv[1]):
    p=line.split()
    if len(p)<6 or not p[0].isdigit(): continue
    k=(p[1],p[2]); w[k].append(float(p[3])); c[k].append(float(p[4]))
    if p[5]!='same': print("DIFF", line)
    st[k]=' '.join(p[6:])
for wl in sorted({k[0] for k in w}):
    pw=statistics.median(w[(wl,'plain')]); pc=statistics.median(c[(wl,'plain')])
    print(f"{wl} plain wall {pw:.3f} cpu {pc:.2f}  walls {w[(wl,'plain')]}")
    for k in w:
        if k[0]!=wl or k[1]=='plain': continue
        mw=statistics.median(w[k]); mc=statistics.median(c[k])
        print(f"  {k[1]:10s} wall {mw:.3f} ratio {pw/mw:.2f} cpu {mc:.2f} cpu-ratio {pc/mc:.2f} walls {w[k]} | {st[k]}")
