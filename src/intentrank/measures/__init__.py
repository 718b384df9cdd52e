"""Measures of rankings and answers, one family per module: ``metrics`` (ir-measures: nDCG,
MRR, ...), ``ncom`` (NCOM coverage), ``diversity`` (alpha-nDCG, ERR-IA, S-recall),
``label_free`` (scores of reformulations without relevance judgments), ``significance``
(paired tests), ``swaps`` (position swaps), ``error_analysis`` (degraded queries).

Pure functions of rankings, judgments and runtimes passed in: layer 2, below the index and
the stages; the experiments that use them are in ``eval/`` (layer 6)."""
