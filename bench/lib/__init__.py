"""What the benchmark scripts of bench/ share: ``results`` (machine facts, the command
header, stored sections of docs/benchmarks.md, JSON results, tables), ``timing`` (seconds,
percentiles, interleaved timing, memory), ``server`` (a free port, starting and stopping a
server process and waiting for its health)."""
