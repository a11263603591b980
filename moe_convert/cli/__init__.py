"""``python -m moe_convert``: the commands (``commands``), their argument rules (``args``), and
the quantized catalog's tables for docs/formats.md (``python -m moe_convert.cli.quant_report``)."""
