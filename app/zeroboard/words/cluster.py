"""Words of the queue and of Slurm: why a job waits, what the cluster said, the queue's command line."""

WORDS: dict[str, tuple[str, str]] = {
    # Slurm (job.slurm, runs.slurm)
    "slurm.no_sbatch": (
        "slurm needs the Slurm client (sbatch, squeue, sacct, scancel) on this machine, and sbatch is not on the PATH",
        "slurm 需要本机装有 Slurm 客户端(sbatch、squeue、sacct、scancel),但 PATH 中找不到 sbatch",
    ),
    "slurm.bad_name": ("{got} is not a Slurm name (letters, digits, _ . - only)", "{got} 不是有效的 Slurm 名称(只能用字母、数字和 _ . -)"),
    "slurm.bad_time": ("{got} is not a Slurm time limit; write e.g. 02:00:00 or 1-12:00:00", "{got} 不是 Slurm 的时间限制;请写成例如 02:00:00 或 1-12:00:00"),
    # the extra #SBATCH options (job.slurm.extra_option): an allow-list
    "slurm.extra_form": (
        "{got} is not an sbatch option: write one option per entry, as --name=value (e.g. --mem=64G)",
        "{got} 不是 sbatch 选项:每项写一个选项,格式为 --name=value(例如 --mem=64G)",
    ),
    "slurm.extra_output": (
        "{got}: the job's output goes to launcher.log in the run folder (output_dir), where the page and "
        "zeroboard runs read it; leave this option out",
        "{got}:任务的输出写入运行目录(output_dir)中的 launcher.log,页面和 zeroboard runs 从那里读取;请去掉这个选项",
    ),
    "slurm.extra_chdir": (
        "{got}: the job runs in the folder ZeroBoard was started from, so that the job's relative paths mean the "
        "same on every node; start ZeroBoard from the folder you want instead",
        "{got}:任务在启动 ZeroBoard 的目录中运行,这样任务中的相对路径在每个节点上含义相同;请改为在想要的目录中启动 ZeroBoard",
    ),
    "slurm.extra_owned": (
        "{got}: ZeroBoard writes {flag} itself from {field}; set {field} instead",
        "{got}:ZeroBoard 根据 {field} 自动写入 {flag};请改为设置 {field}",
    ),
    "slurm.extra_refused": (
        "{got} is not one of the sbatch options a job may add (options that run commands, read or write files, "
        "change the folder or the environment, or change what sbatch answers are refused); allowed: {allowed}",
        "{got} 不在任务可以添加的 sbatch 选项之列(会运行命令、读写文件、改变目录或环境变量、或改变 sbatch 应答的选项"
        "都会被拒绝);允许的选项:{allowed}",
    ),
    "slurm.extra_value": ("{got}: {flag} takes a value; write {flag}=VALUE", "{got}:{flag} 需要一个取值;请写成 {flag}=取值"),
    "slurm.extra_unwritable": ("{got}: its value {why}", "{got}:其取值{why}"),
    "slurm.backslash": (
        "{path} holds a backslash: Slurm drops every backslash from the name of the job's output file, so "
        "launcher.log could not be written in this folder; name the folder without one",
        "{path} 中含有反斜杠:Slurm 会删除输出文件名中的所有反斜杠,launcher.log 将无法写入这个目录;请换一个不含反斜杠的目录名",
    ),
    "slurm.path_unwritable": ("{path} cannot be written into the sbatch script: it {why}", "{path} 无法写入 sbatch 脚本:它{why}"),
    "slurm.node_rank": ("is set by Slurm for each node; leave it 0", "由 Slurm 为每个节点设置;请保持为 0"),
    "slurm.refused": ("Slurm would not run this job: {why}", "Slurm 不会运行这个任务:{why}"),
    "slurm.no_answer": ("Slurm did not answer within {seconds} s (is slurmctld up?)", "Slurm 在 {seconds} 秒内没有响应(slurmctld 是否在运行?)"),
    "slurm.cannot_run": ("sbatch could not be run: {why}", "无法运行 sbatch:{why}"),
    "slurm.submitted": ("submitted to Slurm as job {job_id}", "已提交到 Slurm,作业号 {job_id}"),
    "slurm.pending": ("waiting in Slurm's queue (job {job_id}, position {position}, {reason})", "在 Slurm 队列中等待(作业 {job_id},第 {position} 位,{reason})"),
    "slurm.running_on": ("running on {nodes} (Slurm job {job_id})", "正在 {nodes} 上运行(Slurm 作业 {job_id})"),
    "slurm.scancel": ("scancel {job_id}: Slurm stops every task of the job", "scancel {job_id}:Slurm 停止该作业的所有任务"),
    "slurm.ended_as": ("Slurm says job {job_id} ended as {state}", "Slurm 显示作业 {job_id} 以 {state} 结束"),
    "slurm.still_there": ("Slurm still lists job {job_id} after {seconds} s", "{seconds} 秒后 Slurm 仍列出作业 {job_id}"),
    "cli.sbatch_script": ("# the sbatch script, written to {path} by Start:", "# sbatch 脚本,开始时写入 {path}:"),
    "slurm.script_note": (
        "ZeroBoard's run {run}: the run folder and this Python are on storage every node shares",
        "ZeroBoard 的运行 {run}:运行目录和这个 Python 都在所有节点共享的存储上",
    ),
    # the queue (runs.queue, runs.dispatcher, cli.queue)
    "queue.next": ("starts as soon as the dispatcher looks (within seconds)", "调度进程查看时(几秒内)即会启动"),
    "queue.behind": ("waits behind queue entry {id}, which wants the same devices or folder", "排在队列条目 {id} 之后,它要用相同的设备或目录"),
    "queue.check_failed": ("not started: {field}: {why}", "未启动:{field}:{why}"),
    "cli.queued": ("Queued as {id} (position {position}): {why}", "已加入队列,编号 {id}(第 {position} 位):{why}"),
    "cli.queue_empty": ("The queue is empty.", "队列为空。"),
    "cli.queue_header": ("pos  id        status   waiting   output folder / why", "位置 编号      状态     已等待    输出目录 / 原因"),
    "cli.queue_not_found": ("No queue entry {id} (ids are listed by zeroboard queue).", "没有队列条目 {id}(用 zeroboard queue 查看编号)。"),
    "cli.queue_cancelled": ("Cancelled {id}: {output} will not be started.", "已取消 {id}:{output} 不会被启动。"),
    "cli.queue_moved": ("Moved {id} to position {position}.", "已把 {id} 移到第 {position} 位。"),
    "cli.queue_help": ("list the queue, reorder it, cancel an entry", "查看队列、调整顺序、取消条目"),
    "cli.queue_flag_help": (
        "if the devices or the folder are taken, wait in the queue instead of refusing",
        "如果设备或目录被占用,就在队列中等待,而不是拒绝",
    ),
    "cli.queue_started": ("The queued job started: {run}", "排队的任务已启动:{run}"),
    "cli.queue_failed": ("The queued job was not started: {why}", "排队的任务没有启动:{why}"),
    "status.waiting": ("waiting", "等待中"),
    "slurm.script_head": (
        "the rendezvous: the first node of the allocation, by the address Slurm itself reaches it at",
        "rendezvous:分配到的第一个节点,用 Slurm 自己访问它的地址",
    ),
    # --- the Queue page, and Queue on the Train page ---
    "queue.tab": ("Queue", "队列"),
    "queue.button": ("Queue", "加入队列"),
    "queue.intro": (
        "Jobs waiting for their devices or folder, in the order they start. Each starts through the same checks as "
        "Start as soon as what it waits for is free; **Queue** on the Train page adds one.",
        "等待设备或输出目录空出的任务,按启动顺序排列。所等的资源一空出,就按与“开始”相同的检查启动;在训练页点"
        "“加入队列”即可加入。",
    ),
    "headers.queue": ("#|id|status|waited|output folder|devices|from|why it waits",
                      "序号|编号|状态|已等待|输出目录|设备|来自|等待原因"),
    "queue.selected": ("Queue entry", "队列条目"),
    "queue.up": ("Move up", "上移"),
    "queue.down": ("Move down", "下移"),
    "queue.cancel": ("Cancel entry", "取消条目"),
    "queue.count": ("{n} queued", "队列中 {n} 个"),
    "queue.pick_first": ("Pick a queue entry first.", "请先选择一个队列条目。"),
    "page.queued": (
        "**Queued** as {id} (position {position}): {why}. The Queue tab shows it; it starts through the same checks "
        "as Start.",
        "**已加入队列**,编号 {id}(第 {position} 位):{why}。可在“队列”页查看;启动时做与“开始”相同的检查。",
    ),
    "page.busy_hint": ("**Queue** starts it as soon as they are free.", "点“加入队列”,资源一空出就自动启动。"),
}
