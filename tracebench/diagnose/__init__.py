"""Diagnostic trees (TRACE-Bench, arXiv 2608.16765): simplify a case step by step to find what broke.

- ``_rules``: the four rules as AST rewrites; their order and sources are diagnose/*.toml;
- ``_tree``: the whole tree of a formula (networkx), named as in the paper;
- ``_node``: a node as a case of its own (prompt, references, checklist subset);
- ``_attribute``: node results -> one failure source per operator instance;
- ``_hazard``: hazard shares along an instance's chain (exact in the zoo), and a diagnosis scored against them;
- ``_rates``, ``_chains``: ``--method rates``, the shares estimated from fresh generations under a budget;
- ``_diagnose``: the trees of a window of cases planned, evaluated by a strategy and attributed;
- ``_run``: ``trace diagnose`` over a run folder (:class:`DiagnoseOptions`), through the run harness.

Names are imported from their module on first use: drawing one formula's tree
(``trace diagnose --formula F --dry-run``) needs neither the run harness nor the records.
"""

from __future__ import annotations

from ..lazy import lazy_exports

_WHERE = {
    "..records": ("DIAGNOSIS_FILE", "NODES_FILE", "SUMMARY_FILE", "TREES_FILE"),
    "._attribute": ("UNDETERMINED", "attribute", "pending", "summarize_sources"),
    "._hazard": ("InstanceShares", "ShareAccuracy", "exact_shares", "hazard", "hazard_shares", "instance_chain",
                 "share_accuracy"),
    "._diagnose": ("RootEvidence", "TreePlan", "diagnose", "export_nodes", "format_summary", "majority_verdicts",
                   "merge_diagnoses", "node_results", "plan_trees", "select_cases", "summarize"),
    "._run": ("DiagnoseOptions", "RATES_NO_SHARD", "diagnose_run", "named_providers"),
    "._rates": ("Allocator", "Chain", "GRID", "RHO", "RatesSettings", "observed_rate"),
    "._node": ("compositions_of", "node_case", "root_formula"),
    "._rules": ("Downgrades", "Rule", "Source", "number_terms", "rules", "sources", "targets", "zoo_expectations"),
    "._tree": ("TreeNode", "build_tree", "draw_tree", "tree_json", "tree_nodes"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}

__all__ = sorted(_MODULE_OF)


__getattr__, __dir__ = lazy_exports(__name__, globals(), _MODULE_OF)
