"""Gradio's own words that its i18n does not reach: labels for screen readers and tooltips it writes in English
(``aria-label="More tabs"``), and the descriptions Vega writes for a chart's axes and legend.  Each English text is
exactly the one gradio or Vega writes; ``{name}`` stands for a part that varies.  The page's head script says them
in the page's language (``webui.first_paint``)."""

WORDS: dict[str, tuple[str, str]] = {
    "gradio.more_tabs": ("More tabs", "更多标签页"),
    "gradio.table_actions": ("Table actions", "表格操作"),
    "gradio.chatbot": ("chatbot conversation", "对话记录"),
    "gradio.copy_table": ("Copy table data", "复制表格数据"),
    "gradio.fullscreen": ("Fullscreen", "全屏"),
    "gradio.cell_menu": ("Open cell menu", "打开单元格菜单"),
    "gradio.file_upload": ("File upload", "上传文件"),
    "gradio.dataframe": ("Dataframe", "表格"),
    "gradio.close": ("Close", "关闭"),
    "gradio.fold": ("Fold line", "折叠此行"),
    "gradio.unfold": ("Unfold line", "展开此行"),
    "gradio.vega": ("Vega visualization", "图表"),
    "gradio.scale.linear": ("linear", "线性"),
    "gradio.scale.time": ("time", "时间"),
    "gradio.scale.ordinal": ("ordinal", "有序"),
    "gradio.scale.band": ("band", "分组"),
    "gradio.scale.point": ("point", "点"),
    "gradio.scale.log": ("log", "对数"),
    "gradio.x_axis": ("X-axis titled '{title}' for a {scale} scale with values from {low} to {high}",
                      "横轴「{title}」:{scale}刻度,取值从 {low} 到 {high}"),
    "gradio.y_axis": ("Y-axis titled '{title}' for a {scale} scale with values from {low} to {high}",
                      "纵轴「{title}」:{scale}刻度,取值从 {low} 到 {high}"),
    "gradio.legend": ("Symbol legend titled '{title}' for stroke color with {n} values: {values}",
                      "图例「{title}」:线条颜色,{n} 个值:{values}"),
    "gradio.legend_one": ("Symbol legend titled '{title}' for stroke color with 1 value: {values}",
                          "图例「{title}」:线条颜色,1 个值:{values}"),
    "gradio.chart_title": ("Title text '{title}'", "标题「{title}」"),
}
