"""The Chat page's, the chat worker's and the export's words (对话, 导出)."""

WORDS: dict[str, tuple[str, str]] = {
    # --- the device guard and the worker ---------------------------------------------------------
    "run.busy_chat": (
        "The chat worker ({model}, {memory}, pid {pid}) holds {what}. Unused, it unloads itself {idle} min after its "
        "last answer (in about {left} min); Unload on the Chat page, or `zeroboard chat --unload`, unloads it now.",
        "对话进程({model},占用 {memory},pid {pid})正占用{what}。无人使用时,它在最后一次回答 {idle} 分钟后自动卸载"
        "(约 {left} 分钟后);在对话页面点“卸载模型”,或运行 `zeroboard chat --unload`,可以立即卸载。",
    ),
    "page.busy_chat_hint": (
        "**Unload and start** unloads it (and checks its memory is freed), then starts this job; **Queue** starts it "
        "once the worker has gone.",
        "点“卸载对话并开始”:先卸载它(并核实内存已释放),再启动这个任务;点“加入队列”:对话进程退出后自动启动。",
    ),
    "unload_start": ("Unload and start", "卸载对话并开始"),
    "cli.busy_chat_hint": (
        "Unload it with `zeroboard chat --unload{where}`, then run this command again; or add --queue to start once "
        "it has gone.",
        "用 `zeroboard chat --unload{where}` 卸载它,再重新运行这条命令;或者加上 --queue,等它退出后自动启动。",
    ),
    # --- the worker's keep-alive (outputs.chat_settings.idle_minutes) -----------------------------------------
    "chat.idle_not_a_number": (
        "idle_minutes = {got} is not a number: give the minutes a loaded model may sit unused before it unloads "
        "itself (more than 0, at most {high})",
        "idle_minutes = {got} 不是数字:请给出加载的模型无人使用多少分钟后自动卸载(大于 0,最多 {high})",
    ),
    "chat.idle_zero": (
        "idle_minutes = 0 would unload the model before the first question: give the minutes it may sit unused "
        "(15 by default; fractions too, 0.5 is 30 s); Unload unloads it at once",
        "idle_minutes = 0 会在第一个问题之前就卸载模型:请给出它无人使用多少分钟后卸载(默认 15;可以是小数,0.5 即 30 秒);"
        "要立即卸载请点“卸载模型”",
    ),
    "chat.idle_negative": (
        "idle_minutes = {got}: a model that never unloads holds its devices from every training job; give the minutes "
        "it may sit unused, at most {high} (a week); Start offers to unload it when a job needs its devices",
        "idle_minutes = {got}:永不卸载的模型会一直占着设备,任何训练任务都无法使用;请给出它无人使用多少分钟后卸载,"
        "最多 {high}(一周);任务需要这些设备时,开始训练会提议先卸载它",
    ),
    "chat.idle_too_long": (
        "idle_minutes = {got} is more than a week ({high} minutes): give at most {high}",
        "idle_minutes = {got} 超过一周({high} 分钟):最多 {high}",
    ),
    # --- unloading: the steps a worker that does not answer takes --------------------------------------------
    "chat.unload_no_answer": (
        "The worker (pid {pid}) did not answer the unload request within {seconds} s (hung or stopped): stopping it "
        "as Abort does.",
        "对话进程(pid {pid}){seconds} 秒内没有回应卸载请求(卡住或被暂停):按“中断”的方式停止它。",
    ),
    "chat.unload_still_there": (
        "The worker (pid {pid}) said yes to the unload but was still there {seconds} s later: stopping it as Abort does.",
        "对话进程(pid {pid})答应了卸载,{seconds} 秒后却仍在:按“中断”的方式停止它。",
    ),
    "chat.unload_killed_here": (
        "The worker (pid {pid}) was still there {seconds} s after SIGTERM, with nobody sending SIGKILL: sent it SIGKILL.",
        "发出 SIGTERM {seconds} 秒后对话进程(pid {pid})仍在,也没有进程发送 SIGKILL:已向它发送 SIGKILL。",
    ),
    "chat.unload_supervisor_killed": (
        "Its supervisor (pid {pid}) did not record the end (it hangs too): ended it with SIGKILL and took the worker "
        "off the runs index.",
        "它的监督进程(pid {pid})没有记录结束(同样卡住了):已用 SIGKILL 结束它,并把对话进程从运行索引中移除。",
    ),
    "chat.not_found": ("{path} is not a folder: give a run folder or a model folder", "{path} 不是目录:请给出运行目录或模型目录"),
    "chat.not_a_model": (
        "{path} holds no result, adapter or model (no zeroboard_result.json, adapter_config.json or config.json)",
        "{path} 中没有结果、适配器或模型(没有 zeroboard_result.json、adapter_config.json 或 config.json)",
    ),
    "chat.unknown_result": ("{path}: the result is of an unknown kind ({kind})", "{path}:结果类型未知({kind})"),
    "chat.no_base": (
        "{name} is a model on its own: there is no base model to compare it with",
        "{name} 是一个独立的模型:没有可以对比的基座模型",
    ),
    "chat.bad_request": ("the chat worker does not know the request {op}", "对话进程不认识请求 {op}"),
    "chat.bad_token": ("the request did not carry the worker's token", "请求没有带上对话进程的令牌"),
    "chat.not_ready": ("the chat worker is not ready yet ({status})", "对话进程还没有就绪({status})"),
    "chat.not_listening": ("the chat worker in {folder} is not listening yet", "{folder} 中的对话进程还没有开始监听"),
    "chat.worker_ready": ("[zeroboard] chat worker ready: {name}, loaded in {seconds} s",
                          "[zeroboard] 对话进程已就绪:{name},加载用了 {seconds} 秒"),
    "chat.worker_end": ("[zeroboard] chat worker ends ({why})", "[zeroboard] 对话进程结束({why})"),
    "chat.load_failed": ("the model could not be loaded: {why}", "模型加载失败:{why}"),
    "chat.load_timeout": ("the model was not loaded after {seconds} s", "{seconds} 秒后模型仍未加载完"),
    "chat.answer_failed": ("the answer failed: {why}", "生成回答失败:{why}"),
    # --- bounded requests (outputs.chat_settings, the worker's prompt budget) ----------------------------
    "chat.setting_bad": (
        "the chat setting {name} = {got} is out of bounds: it takes {low} to {high}",
        "对话设置 {name} = {got} 超出范围:取值应在 {low} 到 {high} 之间",
    ),
    "chat.prompt_too_many_chars": (
        "the conversation is {n} characters long, more than a chat request carries ({limit} at most): nothing was "
        "sent; shorten it, or Clear the conversation",
        "对话长 {n} 个字符,超过一次对话请求能携带的上限({limit}):没有发送;请缩短,或清空对话",
    ),
    "chat.request_too_big": (
        "the request is {n} bytes, more than the chat worker reads ({limit}): nothing was sent; shorten the "
        "conversation",
        "请求有 {n} 字节,超过对话进程能读取的上限({limit}):没有发送;请缩短对话",
    ),
    "chat.request_line_too_big": (
        "the request is larger than the chat worker reads ({limit} bytes): shorten the conversation",
        "请求超过了对话进程能读取的上限({limit} 字节):请缩短对话",
    ),
    "chat.prompt_too_long": (
        "the prompt is {n} tokens; this model reads {context} positions and the answer may take {answer} of them, so "
        "a prompt may take {limit}: nothing was generated; shorten it, Clear the conversation, or lower max new tokens",
        "提示词有 {n} 个 token;该模型最多读取 {context} 个位置,回答最多占 {answer} 个,所以提示词最多 {limit} 个:"
        "没有生成;请缩短提示词、清空对话,或调小最大生成长度",
    ),
    "chat.answer_too_long": (
        "max new tokens = {n} leaves no room for a prompt: this model reads {context} positions at most; lower it",
        "最大生成长度 = {n},没有给提示词留下空间:该模型最多读取 {context} 个位置;请调小它",
    ),
    "chat.no_answer": (
        "the chat worker ended the answer without finishing it: nothing was answered; Send again, or Unload and Load",
        "对话进程没有完成回答就结束了:没有得到回答;请重新发送,或卸载后重新加载",
    ),
    "chat.empty_answer": ("empty answer: the model's end token came first", "回答为空:模型一开始就生成了结束符"),
    # --- the Modelfile's template ------------------------------------------------------------------
    "export.tpl_none": ("the tokenizer has no chat template", "分词器没有对话模板"),
    "export.tpl_turn": (
        "the {role} turn does not write the message's content exactly once",
        "{role} 轮没有把消息内容恰好写一次",
    ),
    "export.tpl_prefix": ("adding a {role} turn changes the text before it", "加上一个 {role} 轮会改变它前面的文本"),
    "export.tpl_raises": ("the template fails on a plain conversation: {why}", "模板渲染普通对话时出错:{why}"),
    "export.tpl_system_fused": (
        "the system prompt is written inside the first user turn (as in Mistral's and Gemma's templates), which "
        "the Ollama template written here cannot express",
        "系统提示词写在第一轮用户消息里面(Mistral 和 Gemma 的模板就是这样),这里生成的 Ollama 模板无法表达",
    ),
    "export.tpl_opening": (
        "the template writes text before the first turn that is neither the BOS token nor a system prompt: {text}",
        "模板在第一轮之前写了既不是 BOS 也不是系统提示词的文本:{text}",
    ),
    "export.tpl_differs": (
        "the translation renders a test conversation differently: the template writes {want}, the translation {got}",
        "翻译后的模板渲染测试对话的结果不同:原模板写出 {want},翻译写出 {got}",
    ),
    # --- the export ----------------------------------------------------------------------------------
    "export.card_intro": (
        "Fine-tuned with ZeroBoard from the run `{run}`: a {kind} trained on `{base}`, merged into one standalone "
        "model.",
        "用 ZeroBoard 从运行 `{run}` 微调得到:在 `{base}` 上训练的{kind},已合并成一个独立的模型。",
    ),
    "export.card_data": ("Data", "数据"),
    "export.card_datasets": ("Datasets: {datasets} (from `{folder}`).", "数据集:{datasets}(来自 `{folder}`)。"),
    "export.card_settings": ("Settings", "训练设置"),
    "export.card_losses": ("Final losses", "最终损失"),
    "export.card_use": ("Use", "使用"),
    "export.card_use_text": (
        "`transformers.AutoModelForCausalLM.from_pretrained(this_folder)` loads it; the tokenizer in this folder "
        "carries the chat template it was trained with (`tokenizer.apply_chat_template`).",
        "`transformers.AutoModelForCausalLM.from_pretrained(本目录)` 即可加载;本目录中的分词器带有训练时的对话模板"
        "(`tokenizer.apply_chat_template`)。",
    ),
    "export.card_ollama": (
        "Ollama: `ollama create NAME -f Modelfile` in this folder (its TEMPLATE is the chat template, translated "
        "and checked turn by turn).",
        "Ollama:在本目录运行 `ollama create 名称 -f Modelfile`(其中的 TEMPLATE 是翻译过来并逐轮核对过的对话模板)。",
    ),
    "export.card_ollama_plain": (
        "Ollama: `ollama create NAME -f Modelfile` in this folder; the chat template could not be translated, so the "
        "Modelfile has no TEMPLATE (it says why).",
        "Ollama:在本目录运行 `ollama create 名称 -f Modelfile`;对话模板无法翻译,所以 Modelfile 中没有 TEMPLATE"
        "(文件里写了原因)。",
    ),
    "export.mf_made": ("Made by ZeroBoard {version} from {run}.", "由 ZeroBoard {version} 从 {run} 生成。"),
    "export.mf_template": (
        "TEMPLATE: the tokenizer's chat template, translated and checked to render the same conversations.",
        "TEMPLATE:分词器的对话模板,已翻译并核对过渲染结果相同。",
    ),
    "export.mf_no_template": ("No TEMPLATE: the chat template cannot be translated: {why}", "没有 TEMPLATE:对话模板无法翻译:{why}"),
    "export.mf_bos": (
        "The template starts with {bos}: Ollama's tokenizer adds it, so TEMPLATE leaves it out.",
        "原模板以 {bos} 开头:Ollama 的分词器会自动加上它,所以 TEMPLATE 中没有写它。",
    ),
    "export.gguf_needs": (
        "GGUF: the gguf package is installed, but it only writes GGUF files; a conversion needs llama.cpp's "
        "convert_hf_to_gguf.py (of the llama.cpp version that matches gguf): python convert_hf_to_gguf.py {path} "
        "--outfile {path}/model.gguf --outtype bf16, then FROM ./model.gguf in the Modelfile. ZeroBoard does not "
        "convert it itself.",
        "GGUF:已安装 gguf 包,但它只负责写 GGUF 文件;转换还需要 llama.cpp 的 convert_hf_to_gguf.py(与 gguf 版本"
        "对应的 llama.cpp):python convert_hf_to_gguf.py {path} --outfile {path}/model.gguf --outtype bf16,然后把 "
        "Modelfile 中的 FROM 改成 ./model.gguf。ZeroBoard 自己不做这一步转换。",
    ),
    "export.wrote": (
        "Exported {src} to {path}: {n} parameters in {dtype}, safetensors, tokenizer with its chat template, "
        "generation config, model card (README.md).",
        "已把 {src} 导出到 {path}:{n} 个参数({dtype}),safetensors 权重、带对话模板的分词器、生成配置、"
        "模型卡(README.md)。",
    ),
    "export.modelfile_ok": ("Ollama Modelfile with its chat template: {path}", "带对话模板的 Ollama Modelfile:{path}"),
    "export.modelfile_plain": (
        "Ollama Modelfile without TEMPLATE: {path} (the chat template cannot be translated: {why})",
        "没有 TEMPLATE 的 Ollama Modelfile:{path}(对话模板无法翻译:{why})",
    ),
    # --- the command line ----------------------------------------------------------------------------
    "cli.chat_help": (
        "talk to a run's result or a model: one answer (--prompt) or a conversation; the same worker as the Chat page",
        "和运行结果或模型对话:回答一个问题(--prompt)或进行多轮对话;与对话页面使用同一个对话进程",
    ),
    "cli.chat_target_help": ("a run folder, a LoRA adapter folder or a model folder", "运行目录、LoRA 适配器目录或模型目录"),
    "cli.chat_base_help": (
        "answer as the base model (a LoRA run: its adapter switched off; a full run: the model it started from)",
        "用基座模型回答(LoRA 运行:关闭适配器;全量微调运行:训练前的模型)",
    ),
    "cli.chat_prompt_help": ("one question: print its answer and end", "只问一个问题:打印回答后结束"),
    "cli.chat_system_help": ("the system prompt (default: the run's template's own)", "系统提示词(默认:运行所用模板自带的)"),
    "cli.chat_gpus_help": ("the GPUs to load it on (default: GPU 0, or the CPU without a GPU)",
                           "加载到哪些 GPU(默认:GPU 0;没有 GPU 时用 CPU)"),
    "cli.chat_cpu_help": ("load it on the CPU", "加载到 CPU"),
    "cli.chat_max_prompt_help": (
        "the longest prompt, in tokens (0: the model's context less --max-new-tokens); a longer one is refused",
        "提示词最多的 token 数(0:模型上下文长度减去 --max-new-tokens);更长的会被拒绝",
    ),
    "cli.chat_temperature_help": ("0: greedy (the default)", "0:贪心解码(默认)"),
    "cli.chat_idle_help": (
        "minutes a loaded model may sit unused before its worker unloads itself (default 15; more than 0, at most "
        "10080)",
        "加载的模型无人使用多少分钟后自动卸载(默认 15;大于 0,最多 10080)",
    ),
    "cli.chat_unload_help": (
        "unload the chat workers of this workspace (on --cpu or --gpus when given, else every one), whoever loaded "
        "them, and check their memory is freed",
        "卸载本工作区的对话进程(给出 --cpu 或 --gpus 时只卸载那些设备上的,否则全部),无论是谁加载的,并核实内存已释放",
    ),
    "cli.chat_target_missing": ("give RUN_OR_MODEL (a run, adapter or model folder), or --unload",
                                "请给出 RUN_OR_MODEL(运行、适配器或模型目录),或使用 --unload"),
    "cli.chat_unload_target": ("--unload takes no RUN_OR_MODEL: it unloads whatever is loaded (choose with --cpu or --gpus)",
                               "--unload 不接受 RUN_OR_MODEL:它卸载已加载的模型(用 --cpu 或 --gpus 选择设备)"),
    "cli.chat_none_loaded": ("No chat worker is loaded{where}.", "没有加载中的对话进程{where}。"),
    "cli.chat_on": (" on {where}", "(在 {where} 上)"),
    "cli.chat_unloading": ("Unloading {name} ({where}, pid {pid}) ...", "正在卸载 {name}({where},pid {pid})..."),
    "cli.chat_json_help": ("print the answer and its figures as JSON", "以 JSON 打印回答及其统计"),
    "cli.chat_cpu": ("the CPU", "CPU"),
    "cli.chat_loading": ("Loading {name} on {where} ...", "正在把 {name} 加载到 {where} ..."),
    "cli.chat_ready": ("Loaded in {seconds} s ({dtype}, {memory} GiB held).", "加载用了 {seconds} 秒({dtype},占用 {memory} GiB)。"),
    "cli.chat_reuse": ("Using the chat worker already loaded in {folder}.", "使用 {folder} 中已加载的对话进程。"),
    "cli.chat_hint": (
        "Ask anything; Ctrl-C stops an answer, Ctrl-D (or Ctrl-C at the prompt) ends the session.",
        "请输入问题;Ctrl-C 停止当前回答,Ctrl-D(或在提示符处按 Ctrl-C)结束会话。",
    ),
    "cli.chat_unloaded": ("Unloaded: {memory} GiB freed ({verified}).", "已卸载:释放 {memory} GiB({verified})。"),
    "cli.chat_verified": ("verified: the worker's process is gone", "已核实:对话进程已经退出"),
    "cli.chat_not_verified": ("NOT verified: the worker's process is still there", "未能核实:对话进程仍在"),
    "cli.export_help": (
        "a run as a standalone folder: merged safetensors, tokenizer with its chat template, generation config, "
        "model card and an Ollama Modelfile",
        "把运行导出为独立目录:合并后的 safetensors 权重、带对话模板的分词器、生成配置、模型卡和 Ollama Modelfile",
    ),
    "cli.export_run_help": ("the run folder (or an adapter or model folder)", "运行目录(或适配器、模型目录)"),
    # --- the Chat page (对话) ---------------------------------------------------------------------------
    "tab_train": ("Train", "训练"),
    "chat.tab": ("Chat", "对话"),
    "chat.target": ("Run or model", "运行记录或模型"),
    "chat.devices": ("Devices", "设备"),
    "chat.cpu": ("CPU", "CPU"),
    "chat.idle": ("Unload after idle (minutes)", "空闲多久后卸载(分钟)"),
    "chat.load": ("Load", "加载模型"),
    "chat.unload": ("Unload", "卸载模型"),
    "chat.settings": ("System prompt and sampling", "系统提示词与采样参数"),
    "chat.system": ("System prompt", "系统提示词"),
    "chat.max_new_tokens": ("Max new tokens", "最大生成长度"),
    "chat.temperature": ("Temperature (0: greedy)", "温度系数(0:贪心解码)"),
    "chat.top_p": ("Top-p", "Top-p 采样值"),
    "chat.seed": ("Seed", "随机种子"),
    "chat.side_by_side": ("Side by side: base | tuned", "并排对比:基座 | 微调后"),
    "chat.side_by_side_info": (
        "the same question, the same seed: the base model answers on the left, the tuned one on the right",
        "同一个问题、同一个随机种子:左边是基座模型的回答,右边是微调后模型的回答",
    ),
    "chat.side_base": ("Base model", "基座模型"),
    "chat.side_tuned": ("Tuned model", "微调后的模型"),
    "chat.question": ("Ask something and press Enter", "输入问题后按回车"),
    "chat.send": ("Send", "发送"),
    "chat.stop": ("Stop", "停止"),
    "chat.clear": ("Clear", "清空对话"),
    "chat.kind.lora_adapter": ("LoRA adapter", "LoRA 适配器"),
    "chat.kind.full_model": ("full model", "完整模型"),
    "chat.kind.model": ("model", "模型"),
    "chat.base_adapter_off": (
        "the base side is the same model with its adapter switched off (peft's disable_adapter)",
        "基座一侧是同一个模型关闭适配器后的回答(peft 的 disable_adapter)",
    ),
    "chat.base_loaded_beside": (
        "the base side is the model training started from ({model}), loaded beside it the first time it is asked",
        "基座一侧是训练开始时的模型({model}),第一次提问时在旁边另外加载",
    ),
    "chat.base_none": ("a model on its own: no base side to compare", "独立的模型:没有可以对比的基座"),
    "chat.template_named": ("the {name} template the run trained with (saved with its tokenizer)",
                            "运行训练时使用的 {name} 模板(随分词器保存)"),
    "chat.template_own": ("the chat template its tokenizer saved", "分词器保存的对话模板"),
    "chat.about": (
        "**{name}**: a {kind}, {precision}; chat template: {template}; {base}.",
        "**{name}**:{kind},{precision};对话模板:{template};{base}。",
    ),
    "chat.none_loaded": ("No model loaded.", "没有加载模型。"),
    "chat.others_loaded": ("No model loaded on these devices; loaded elsewhere: {names}",
                           "这些设备上没有加载模型;其他设备上已加载:{names}"),
    "chat.loading": ("Loading **{name}** on {where} ...", "正在把 **{name}** 加载到 {where} ..."),
    "chat.loading_now": ("Loading {name} ...", "正在加载 {name} ..."),
    "chat.ready": (
        "**{name}** loaded on {where} ({dtype}): {memory} GiB held, loaded in {seconds} s; unused, it unloads itself "
        "{minutes} min after its last answer (in about {left} min; worker pid {pid}).",
        "**{name}** 已加载到 {where}({dtype}):占用 {memory} GiB,加载用了 {seconds} 秒;无人使用时在最后一次回答 "
        "{minutes} 分钟后自动卸载(约 {left} 分钟后;对话进程 pid {pid})。",
    ),
    "chat.pick_first": ("Pick a run or a model first.", "请先选择运行记录或模型。"),
    "chat.bad_devices": ("Pick the CPU, or one or more GPUs (not both).", "请选择 CPU,或一个或多个 GPU(不能同时选)。"),
    "chat.load_refused": ("Not loaded: {why}", "没有加载:{why}"),
    "chat.loaded": ("Loaded {name}.", "已加载 {name}。"),
    "chat.unloading": ("Unloading ...", "正在卸载 ..."),
    "chat.nothing_to_unload": ("No model is loaded on {where}.", "{where} 上没有加载模型。"),
    "chat.nothing_here_others": (
        "No model is loaded on {where}; loaded elsewhere: {names}. Pick its devices to unload it.",
        "{where} 上没有加载模型;其他设备上已加载:{names}。选择它所在的设备即可卸载。",
    ),
    "chat.unloaded_cpu": (
        "Unloaded: the worker (pid {pid}) has ended and its {memory} GiB of RAM with it (verified).",
        "已卸载:对话进程(pid {pid})已退出,它占用的 {memory} GiB 内存随之释放(已核实)。",
    ),
    "chat.unloaded_gpu": (
        "Unloaded: the worker (pid {pid}) has ended, NVML charges it nothing any more ({memory} GiB freed); now {used}.",
        "已卸载:对话进程(pid {pid})已退出,NVML 不再记它占用任何显存(释放 {memory} GiB);现在 {used}。",
    ),
    "chat.unload_left": (
        "The worker (pid {pid}) is still there after SIGTERM and SIGKILL, holding {memory} GiB: the system has not "
        "ended it, as happens to a process stuck in the kernel (a hung disk or driver); `ps -o stat,cmd -p {pid}` "
        "shows its state.",
        "发出 SIGTERM 和 SIGKILL 后对话进程(pid {pid})仍在,占用 {memory} GiB:系统没有结束它,卡在内核里的进程"
        "(磁盘或驱动无响应)会这样;`ps -o stat,cmd -p {pid}` 可以查看它的状态。",
    ),
    "chat.figures": ("{side}: {tokens} tokens, first after {ttft} s, {tps} tokens/s", "{side}:{tokens} 个 token,首个 token 用时 {ttft} 秒,每秒 {tps} 个"),
    "chat.stopped": ("stopped", "已停止"),
    "chat.empty_question": ("Type a question first.", "请先输入问题。"),
    "chat.load_first": ("Load a model first.", "请先加载模型。"),
    "chat.worker_gone": ("The chat worker cannot be reached: {why}", "无法连接对话进程:{why}"),
    # --- the run's view: Export ----------------------------------------------------------------------
    "export": ("Export", "导出"),
    "export_dir": (
        "New folder (standalone model + Ollama Modelfile)",
        "新目录(独立模型 + Ollama Modelfile)",
    ),
}
