import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+'/*.json')):
    d=json.load(open(f)); m=d['metrics']
    a=d.get('batches',{}).get('action',{})
    n=sum(int(k)*v for k,v in a.items()); fw=sum(a.values())
    print(f.split('/')[-1][:-5].ljust(14), 'att %.3f'%m['attainment'],'gp %.1f'%m['goodput_rps'],'thr %.1f'%m['throughput_rps'],'req',m['requests'], {k:round(v,3) for k,v in m['per_budget'].items()}, 'py %.2f'%d['speed_probe']['python']['median_ms'], 'mm %.2f'%d['speed_probe']['matmul']['median_ms'], 'A/fw %.2f'%(n/max(fw,1)), 'sat %.2f'%(d.get('saturation') or {}).get('saturated_share',0))
