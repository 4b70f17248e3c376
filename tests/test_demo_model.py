"""The demo model's pretraining takes as many threads as there are idle cores, and gives the caller's back.

Its matrices are small: beside busy processes its threads wait for each other's turn at every operation (the whole
build took 165 s on two threads and 52 s on one beside two busy processes on 2 cores).  The bytes it saves do not
depend on the count (checked when this was written: one thread and two gave the same safetensors file).
"""

from __future__ import annotations

import pytest

from zeroboard.job import devices


@pytest.mark.parametrize("busy, expected", [(0.0, 2), (20.0, 2), (30.0, 1), (50.0, 1), (90.0, 1), (100.0, 1)])
def test_idle_cores_are_the_idle_share_of_the_machine_and_at_least_one(monkeypatch, busy, expected):
    monkeypatch.setattr(devices, "cpu_count", lambda: 2)
    monkeypatch.setattr(devices.psutil, "cpu_count", lambda: 2)
    monkeypatch.setattr(devices.psutil, "cpu_percent", lambda interval: busy)
    assert devices.idle_cores() == expected


def test_idle_cores_never_exceed_the_cores_this_process_may_use(monkeypatch):
    monkeypatch.setattr(devices, "cpu_count", lambda: 2)  # an affinity mask of 2 on a 16-core machine
    monkeypatch.setattr(devices.psutil, "cpu_count", lambda: 16)
    monkeypatch.setattr(devices.psutil, "cpu_percent", lambda interval: 0.0)
    assert devices.idle_cores() == 2


def test_idle_cores_reads_this_machine():
    assert 1 <= devices.idle_cores(0.1) <= devices.cpu_count()


def test_the_pretraining_runs_on_the_idle_cores_and_gives_the_threads_back(monkeypatch, tmp_path):
    torch = pytest.importorskip("torch")
    from zeroboard.data.demo import write_demo_data
    from zeroboard.training import demo_model

    monkeypatch.setenv("ZEROBOARD_ALLOW_PATHS", f"{tmp_path}:rw")
    data = write_demo_data(tmp_path / "data")
    tokenizer = demo_model.train_tokenizer(data)
    model = demo_model.llama(tokenizer, 0, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                             num_attention_heads=2, num_key_value_heads=1)
    seen = []
    real_step = torch.optim.AdamW.step

    def step(self, *args, **kwargs):
        seen.append(torch.get_num_threads())
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", step)
    monkeypatch.setattr(devices, "idle_cores", lambda: 1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        loss = demo_model.pretrain(model, tokenizer, data, steps=3)
        assert seen == [1, 1, 1] and torch.get_num_threads() == 2  # one idle core: one thread, then the caller's two
        assert loss == loss and loss > 0  # a number: the pass ran
        seen.clear()
        monkeypatch.setattr(devices, "idle_cores", lambda: 8)  # never more than the caller had
        demo_model.pretrain(model, tokenizer, data, steps=2)
        assert seen == [2, 2] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
