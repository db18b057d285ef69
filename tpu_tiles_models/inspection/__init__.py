"""`tpu-tiles inspect`: a data report for any tile:xla data root, real or synthetic.

`inspect_root` (`report`) reads each kernel once into fixed-size accumulators (`stats`) and
returns a JSON-ready dict whose keys it documents; `format_table` and `draw` (`render`) show
it; `command` is the CLI. The figures: docs/synthetic.md ("Inspecting a data root").
"""
