"""Pod start per image and node on a local cluster with real nodes (`cluster up
--jetson-runtime real`): for each (node, image, step) a pod runs one Python command; printed
are the wall time from create to Succeeded (sandbox, CNI, the container, the interpreter) and
the wall and CPU seconds the command itself measured inside the container. The figures in
docs/cluster.md ("Real Jetson nodes", "What a real Jetson node costs").

    .venv/bin/python scripts/measure-pod-start.py --kubeconfig DIR/kubeconfig \\
        --node gpu-server-0=ghcr.io/edgetrain/node-agent:0.1.0 \\
        --node jetson-nano-0=ghcr.io/edgetrain/node-agent:0.1.0 [--repeat 2] [--json]

Each step is one pod, run after the previous one finished, so the figures do not overlap.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from pathlib import Path

from edgetrain.cluster import KubeClient, api_path

# (name, Python code): each prints the wall seconds its own part took and the CPU seconds it
# used (under emulation, QEMU's); CPU seconds vary far less than wall time on a loaded host.
_TIMED = ("import time, resource; t, c = time.perf_counter(), time.process_time(); {}; "
          "print(time.perf_counter() - t, time.process_time() - c)")
_TIMED_RUN = ("import time, resource, subprocess; t = time.perf_counter(); "
              "subprocess.run({!r}, capture_output=True, check=True); "
              "u = resource.getrusage(resource.RUSAGE_CHILDREN); "
              "print(time.perf_counter() - t, u.ru_utime + u.ru_stime)")
STEPS = (
    ("interpreter", "import time; print(time.process_time(), time.process_time())"),
    ("import edgetrain.kube", _TIMED.format("import edgetrain.kube")),
    ("edgetrain node-agent --help", _TIMED_RUN.format(["edgetrain", "node-agent", "--help"])),
    # The wrapper of every profile, train and estimate pod.
    ("edgetrain worker --help", _TIMED_RUN.format(["edgetrain", "worker", "--help"])),
    ("import torch", _TIMED.format("import torch")),
)


def run_pod(client: KubeClient, namespace: str, node: str, image: str, code: str,
            timeout_s: float) -> tuple[float, str, str]:
    """(create → Succeeded seconds, the container's output, phase)."""
    name = f"start-{uuid.uuid4().hex[:8]}"
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
        "nodeName": node, "restartPolicy": "Never", "automountServiceAccountToken": False,
        "containers": [{"name": "c", "image": image, "imagePullPolicy": "Never",
                        "command": ["python", "-c", code]}]}}
    path = api_path("v1", "pods", namespace, name)
    t0 = time.monotonic()
    client.create(api_path("v1", "pods", namespace), pod)
    phase = ""
    while time.monotonic() - t0 < timeout_s:
        phase = client.get(path).get("status", {}).get("phase", "")
        if phase in ("Succeeded", "Failed"):
            break
        time.sleep(0.1)
    took_s = time.monotonic() - t0
    out = client.get_text(f"{path}/log") if phase else ""
    client.delete_ignore_missing(path)
    return took_s, out.strip(), phase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--node", action="append", required=True, help="NODE=IMAGE")
    parser.add_argument("--namespace", default="default")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--steps", default=",".join(s for s, _ in STEPS))
    parser.add_argument("--timeout-s", type=float, default=600)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    wanted = [s for s in STEPS if s[0] in args.steps.split(",")]
    rows = []
    with KubeClient.from_kubeconfig(Path(args.kubeconfig)) as client:
        for pair in args.node:
            node, image = pair.split("=", 1)
            for step, code in wanted:
                runs = [run_pod(client, args.namespace, node, image, code, args.timeout_s)
                        for _ in range(args.repeat)]
                ok = [r for r in runs if r[2] == "Succeeded"]
                inner = [float(r[1].split()[-2]) for r in ok if r[1]]
                cpu = [float(r[1].split()[-1]) for r in ok if r[1]]
                rows.append({
                    "node": node, "image": image, "step": step,
                    "pod_s": [round(r[0], 2) for r in runs],
                    "inside_s": [round(x, 2) for x in inner],
                    "inside_cpu_s": [round(x, 2) for x in cpu],
                    "median_pod_s": round(statistics.median(r[0] for r in runs), 2),
                    "phases": [r[2] for r in runs],
                })
                if not args.json:
                    r = rows[-1]
                    print(f"{node:16} {step:30} pod {r['pod_s']} s  inside {r['inside_s']} s"
                          f" (CPU {r['inside_cpu_s']} s)"
                          f"  {'' if len(ok) == len(runs) else r['phases']}", flush=True)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
