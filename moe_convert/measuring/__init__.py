"""Measuring one conversion of any format's layer: peak memory (``memory``), traffic and launches
(``traffic``), time against a same-size copy (``timing``)."""
