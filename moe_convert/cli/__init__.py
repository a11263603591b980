"""``python -m moe_convert``: the commands (``commands``), their argument rules (``args``), and
the quantized formats' tables for docs/formats.md (``python -m moe_convert.cli.report``)."""
