"""The output check's words: what a run saved, what it is for, consolidate, merge, reload and answer."""

WORDS: dict[str, tuple[str, str]] = {
    "out.kind.lora_adapter": ("LoRA adapter", "LoRA 适配器"),
    "out.kind.full_model": ("full model", "完整模型"),
    "out.kind.zero_checkpoint": ("ZeRO checkpoint", "ZeRO 检查点"),
    "out.kind.trainer_checkpoint": ("trainer checkpoint", "训练检查点"),
    "out.run": ("Run {run}", "运行 {run}"),
    "out.result": ("  result: {kind} after {steps} steps, {how}", "  结果:{steps} 步之后的{kind},{how}"),
    "out.made_by": ("made by {by}", "由 {by} 生成"),
    "out.trained": ("train loss {loss} (the last logged step; mean over the run {mean}), DeepSpeed stage {stage}",
                    "训练 loss {loss}(最后记录的一步;全程平均 {mean}),DeepSpeed stage {stage}"),
    "out.eval_loss": (", eval loss {loss}", ",验证 loss {loss}"),
    "out.step": (" (step {step})", "(第 {step} 步)"),
    "out.tracker": ("  tracker {tracker}: {path}; open it with: {open}", "  实验跟踪 {tracker}:{path};打开方式:{open}"),
    "out.what.lora": (
        "a LoRA adapter: it needs its base model ({base}) to load (peft.PeftModel.from_pretrained(base, path)); "
        "merge it to get a standalone model",
        "LoRA 适配器:需要它的基座模型({base})才能加载(peft.PeftModel.from_pretrained(base, path));合并后得到一个独立的模型",
    ),
    "out.what.full": (
        "a full model: transformers.AutoModelForCausalLM.from_pretrained(path) loads it",
        "完整模型:用 transformers.AutoModelForCausalLM.from_pretrained(path) 加载",
    ),
    "out.what.zero": (
        "a DeepSpeed ZeRO checkpoint (global_step{step}/, latest, zero_to_fp32.py): per-rank shards of weights "
        "and optimizer states for resuming; not a model from_pretrained can load until consolidated "
        "(zeroboard consolidate {path} NEW_FOLDER)",
        "DeepSpeed ZeRO 检查点(global_step{step}/、latest、zero_to_fp32.py):按进程切分的权重和优化器状态,用于续训;"
        "整合之前 from_pretrained 无法加载(zeroboard consolidate {path} 新目录)",
    ),
    "out.what.trainer": (
        "a trainer checkpoint without loadable weights (optimizer and scheduler state only)",
        "没有可加载权重的训练检查点(只有优化器和调度器状态)",
    ),
    "out.partial_skipped": (
        "incomplete checkpoint(s) skipped (a save was interrupted): {names}",
        "跳过了不完整的检查点(保存被打断):{names}",
    ),
    "out.no_result": (
        "no zeroboard_result.json: the run did not finish saving a result",
        "没有 zeroboard_result.json:这次运行没有保存完结果",
    ),
    "out.no_result_ckpt": (
        "no zeroboard_result.json: the run did not finish saving a result (it has checkpoints)",
        "没有 zeroboard_result.json:这次运行没有保存完结果(有检查点)",
    ),
    "out.result_no_weights": (
        "zeroboard_result.json says {kind}, but no weights were found in {path}",
        "zeroboard_result.json 写的是 {kind},但在 {path} 中没有找到权重",
    ),
    "out.result_not_json": ("{path} is not valid JSON; the run did not finish writing it", "{path} 不是有效的 JSON;这次运行没有写完它"),
    "out.not_folder": ("{path} is not a folder; give the output_dir of a run", "{path} 不是目录;请给出一次运行的 output_dir"),
    "out.nothing_there": (
        "{path} holds no result, model or checkpoint: is it the output_dir of a run?",
        "{path} 中没有结果、模型或检查点:它是一次运行的 output_dir 吗?",
    ),
    "out.no_result_file": ("{run} holds no {file}: the run did not finish saving a result", "{run} 中没有 {file}:这次运行没有保存完结果"),
    "out.nothing_final": ("{run} holds no {file}: nothing final to reload", "{run} 中没有 {file}:没有可以重新加载的最终结果"),
    "out.nothing_final_zero": (
        "{run} holds a ZeRO checkpoint, not a model: consolidate it first (zeroboard consolidate)",
        "{run} 中是 ZeRO 检查点,不是模型:请先整合(zeroboard consolidate)",
    ),
    "out.exists": ("{path} already exists and is not empty; choose a new folder", "{path} 已存在且不为空;请换一个新目录"),
    "out.inside_run": ("{path} is inside the run folder; choose a folder outside {run}", "{path} 在运行目录里面;请选择 {run} 之外的目录"),
    "out.no_zero": (
        "{path} holds no complete ZeRO checkpoint (global_stepN/ with latest); it was saved without DeepSpeed or without save_steps",
        "{path} 中没有完整的 ZeRO 检查点(带 latest 的 global_stepN/);它是在没有 DeepSpeed 或没有 save_steps 的情况下保存的",
    ),
    "out.no_config": (
        "no config.json in {ckpt}, {run} or the base model {base}: cannot build a loadable model",
        "{ckpt}、{run} 和基座模型 {base} 中都没有 config.json:无法生成可加载的模型",
    ),
    "out.zero_of_lora": (
        "{ckpt} is the ZeRO checkpoint of a LoRA run: its adapter is already saved as "
        "adapter_model.safetensors; merge that instead (zeroboard merge)",
        "{ckpt} 是 LoRA 运行的 ZeRO 检查点:它的适配器已经保存为 adapter_model.safetensors;请改为合并它(zeroboard merge)",
    ),
    "out.merge_full": (
        "{path} holds a full model: nothing to merge (no adapter_config.json)",
        "{path} 中是完整模型:没有可合并的内容(没有 adapter_config.json)",
    ),
    "out.merge_none": ("{path} holds no LoRA adapter (no adapter_config.json)", "{path} 中没有 LoRA 适配器(没有 adapter_config.json)"),
    "out.merge_base": (
        "the adapter's base model {base} is not a local folder with config.json; give it with --base",
        "适配器的基座模型 {base} 不是含有 config.json 的本地目录;请用 --base 指定",
    ),
    "out.reload_head": ("Reload and answer (greedy):", "重新加载并回答(贪心解码):"),
    "out.tuned_line": ("  Q: {q}\n     tuned: {a}{mark}", "  问:{q}\n     微调后:{a}{mark}"),
    "out.base_line": ("     base:  {b}", "     原模型:{b}"),
    "out.matches": ("  [matches the training answer]", "  [与训练答案一致]"),
    "out.differs": ("  [differs from the training answer]", "  [与训练答案不同]"),
    "out.zero_mismatch": ("the ZeRO checkpoint does not match the model's config: missing {missing}; unexpected {unexpected}",
                          "ZeRO 检查点与模型的 config 不一致:缺少 {missing};多出 {unexpected}"),
    # the Modelfile's values and comments (outputs.modelfile.quoted, comment)
    "export.mf_quotes": ('it holds """, which a Modelfile value cannot quote', '其中含有 """,Modelfile 的取值无法引用它'),
    "export.mf_dropped": (
        "it holds {char} at position {pos}, a character Ollama drops from a Modelfile without a word",
        "第 {pos} 个字符是 {char},Ollama 读取 Modelfile 时会悄悄丢弃这种字符",
    ),
    "export.mf_left_out": ("{directive} left out: {why}", "省略了 {directive}:{why}"),
}
