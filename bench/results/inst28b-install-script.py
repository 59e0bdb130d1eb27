"""Install experiment: fresh virtual sim, helm install (bench's way), per-process CPU, py-spy dumps.
usage: inst.py NAME RACKS RACKS_PER_HOST(0=default) MODE(clique|domain|ds) [spy]"""
import asyncio, os, sys, time, subprocess, json
from pathlib import Path
from compute_domains.bench import install, drivers, rounds
from compute_domains.cli import options
from compute_domains.infra import kube
from compute_domains.sim import lifecycle, state, topology
name, racks, rph, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
spy = len(sys.argv) > 5
from compute_domains.cli import benchdrivers
from compute_domains.sim import toolchain
paths = state.SimPaths(options.sim_home(), name)
bin_dir = Path(os.environ["BIN"])
vals = {"clique": ("imex.agents=resident", "imex.scope=perClique", "nvidiaDriverRoot=/run/nvidia/driver"),
        "domain": ("imex.agents=resident",), "ds": ()}[mode]
chart = Path("deployments/helm/compute-domains") if Path("deployments/helm/compute-domains").exists() else None
t0 = time.monotonic(); load0 = os.getloadavg()[0]
started = lifecycle.start(paths, bin_dir, shape=topology.Shape(racks=racks), patience=True, nodes_mode="virtual", racks_per_host=rph or None)
up = time.monotonic() - t0
rec = state.read_state(paths)
def procs():
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit(): continue
        try:
            st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()[:160]
        except OSError: continue
        out[pid] = (cmd, (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK"))
    return out
async def main():
    from compute_domains.cli import benchdrivers as bd
    import dataclasses
    base = bd.ours("compute-domains")
    spec = dataclasses.replace(base, values=base.values + vals)
    client = kube.client(kube.KubeSettings(kubeconfig=paths.kubeconfig, field_manager="bench"))
    def metrics(tag):
        with open(f"/tmp/inst28b/metrics-{name}-{racks}-{mode}-{tag}.txt", "w") as fh:
            subprocess.run([str(bin_dir / "kubectl"), "--kubeconfig", str(paths.kubeconfig), "get", "--raw", "/metrics"], stdout=fh)
    metrics("before")
    watcher = subprocess.Popen([str(bin_dir / "kubectl"), "--kubeconfig", str(paths.kubeconfig), "get", "pods", "-n", "compute-domains", "-w", "-o", "json", "--output-watch-events"], stdout=open(f"/tmp/inst28b/podwatch-{name}-{racks}-{mode}.json", "w"), stderr=subprocess.DEVNULL) if os.environ.get("PODWATCH") else None
    before = procs(); load = os.getloadavg()[0]
    t = time.monotonic()
    spies = []
    if spy:
        hosts = [p for p, (c, _) in before.items() if "node-host" in c or ("sim" in c and "supervise" in c)]
        for p in hosts:
            spies.append(subprocess.Popen(["/tmp/inst28b/pyspy/bin/py-spy", "record", "-p", p, "-o", f"/tmp/inst28b/spy-{name}-{p}.txt", "-f", "raw", "-r", "20", "-d", "120", "--nonblocking"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    await install.install(bin_dir / "helm", paths.kubeconfig, spec)
    inst = time.monotonic() - t
    ready = await install.wait_ready(client, spec.namespace, timeout=600, registered=rounds._registered(paths.root / "control.sock"))
    after = procs()
    metrics("after")
    if watcher: watcher.terminate()
    for s in spies: s.send_signal(2)
    for s in spies: s.wait()
    agg = {}
    for pid, (cmd, c) in after.items():
        b = before.get(pid, (cmd, 0.0))[1]
        if c - b < 0.2: continue
        key = (cmd.split()[0].rsplit("/",1)[-1] + " " + " ".join(cmd.split()[1:4]))[:70]
        agg.setdefault(key, []).append(round(c - b, 1))
    print(json.dumps({"name": name, "racks": racks, "rph": rph, "mode": mode, "sim_up_s": round(up,1), "load_at_install": load, "install_s": round(inst,1), "ready_s": round(ready,1)}))
    for k, v in sorted(agg.items(), key=lambda kv: -sum(kv[1])):
        print(f"  {sum(v):7.1f} CPU-s  x{len(v)}  {k}   {v if len(v)>1 else ''}")
    await client.close()
try:
    asyncio.run(main())
finally:
    if not os.environ.get("KEEP"):
        lifecycle.stop(paths, process=started.process)
