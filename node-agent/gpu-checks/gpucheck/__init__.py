"""GPU checks of the node agent: real CUDA work on a real GPU, driven through the production code.

Entry points: `node-agent/gpu-checks/run-on-gpu.sh` (the one command for a lent GPU machine) and
`node-agent/gpu-checks/run_gpu_checks.py` (the script it runs). See docs/node-agent.md, "GPU checks".

Modules: `analysis` (pure: rates, targets, latencies, report shaping), `preflight` (what the machine
has, what each check needs), `procs` (CUDA worker processes, cleanup), `world` (the agent wired to
the real NVML backend, cgroups and processes), `checks_mps` / `checks_agent` (the checks), `cli`.

May import the node side (`tessera_node`) and PyTorch; nothing imports it (it runs on a lent GPU
machine as a script).
"""
