# kineto_loop.py in brief, for a GPU machine without this checkout: python kineto_min.py OUT.json.gz STEPS
import sys
import numpy as np
import torch
from torch.profiler import ProfilerActivity as A, profile, record_function as rf, schedule
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(16, 32, 3, padding=1),
                          torch.nn.ReLU()).cuda().eval()
def step():
    with rf("get batch"):
        x = torch.rand(64, 3, 128, 128).cuda()
    with rf("compute"), torch.no_grad():
        y = net(x)
    with rf("process output"):
        return float(np.bincount(y.cpu().numpy().argmax(axis=1).ravel(), minlength=32)[:3].sum())
n = int(sys.argv[2])
with profile(activities=[A.CPU, A.CUDA], schedule=schedule(wait=1, warmup=1, active=n - 2), with_stack=True,
             on_trace_ready=lambda p: p.export_chrome_trace(sys.argv[1])) as p:
    for _ in range(n):
        step()
        p.step()
