"""The memory plan's words for ``--fit`` measured on the devices (runs.probes), merged into :mod:`.plan`'s."""

WORDS: dict[str, tuple[str, str]] = {
    "plan.probe.col": (" measured tokens/s |", " 实测 token/s |"),
    "plan.probe.pick": ("measured {tps} tokens/s, {x}× the next", "实测 {tps} token/s,是次优设置的 {x} 倍"),
    "plan.probe.pick_alone": ("measured {tps} tokens/s (the only setting measured)", "实测 {tps} token/s(唯一实测的设置)"),
    "plan.probe.pick_line": (" It was {pick}.", " 它{pick}。"),
    "plan.probe.measured": (
        "Ranked by what each setting measured on these devices (a few optimizer steps each, kept and reused).",
        "按各设置在这些设备上的实测速度排序(每个设置跑几步优化器更新,结果会保存并复用)。",
    ),
    "plan.probe.partly": (
        "Measured settings first, by their tokens/s; the others are ranked by the step-time model: the probe budget ran out.",
        "实测过的设置按 token/s 排在前面;其余按步时模型排序:试跑时限已用完。",
    ),
    "plan.probe.busy": (
        "Measured settings first; the others are ranked by the step-time model: the devices were taken by another job.",
        "实测过的设置排在前面;其余按步时模型排序:设备被另一个任务占用。",
    ),
    "plan.probe.predicted": (
        "Ranked by the step-time model: a prediction, nothing was run (the job's devices are not on this machine, or "
        "the probe budget is 0).",
        "按步时模型排序:这是预测,没有实际试跑(本机没有该任务的设备,或试跑时限为 0)。",
    ),
    "plan.probe.progress": (
        "Probing {setting} at {mb} x {acc} ({i}/{n}, {left} s of the budget left)…",
        "正在试跑 {setting},{mb} × {acc}(第 {i}/{n} 个,试跑时限还剩 {left} 秒)……",
    ),
    "plan.probe.done": ("{setting} at {mb} x {acc}: {result}", "{setting},{mb} × {acc}:{result}"),
    "plan.probe.result.measured": ("{tps} tokens/s", "{tps} token/s"),
    "plan.probe.result.oom": ("out of memory", "显存不足"),
    "plan.probe.result.failed": ("failed: {why}", "失败:{why}"),
    "plan.probe.result.out_of_time": ("out of time", "超出时限"),
    "plan.probe.result.busy": ("devices busy: {why}", "设备被占用:{why}"),
    "plan.probe.cpu_note": (
        "CPU processes: the step-time model is the H200's, so the ranking is by measurement only.",
        "CPU 进程:步时模型基于 H200,因此只按实测排序。",
    ),
}
