"""/metrics reports GPU memory when the models are on CUDA (torch.cuda patched here), and nothing on the CPU."""

from __future__ import annotations

from types import SimpleNamespace

import torch


def test_no_gpu_gauges_before_cuda_is_used(make_client):
    text = make_client().get("/metrics").text
    assert "semworld_gpu_memory" not in text  # this process never initialised CUDA


def test_gpu_memory_gauges_on_cuda(make_client, monkeypatch):
    client = make_client()
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda i: 1000 + i)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda i: 2000 + i)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda i: 3000 + i)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=8000 + i))
    text = client.get("/metrics").text
    for line in (
        'semworld_gpu_memory_allocated_bytes{device="cuda:0"} 1000.0',
        'semworld_gpu_memory_allocated_bytes{device="cuda:1"} 1001.0',
        'semworld_gpu_memory_reserved_bytes{device="cuda:0"} 2000.0',
        'semworld_gpu_memory_peak_allocated_bytes{device="cuda:1"} 3001.0',
        'semworld_gpu_memory_total_bytes{device="cuda:1"} 8001.0',
    ):
        assert line in text, line
