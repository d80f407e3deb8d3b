"""Diagnostic trees (TRACE-Bench, arXiv 2608.16765): simplify a case step by step to find what broke.

- ``_rules``: the four rules as AST rewrites; their order and sources are diagnose/*.toml;
- ``_tree``: the whole tree of a formula (networkx), named as in the paper;
- ``_node``: a node as a case of its own (prompt, references, checklist subset);
- ``_attribute``: node results -> one failure source per operator instance;
- ``_diagnose``: ``trace diagnose`` over a run folder, through the run harness.
"""

from __future__ import annotations

from ..records import DIAGNOSIS_FILE, NODES_FILE, SUMMARY_FILE, TREES_FILE
from ._attribute import UNDETERMINED, attribute, pending, summarize_sources
from ._diagnose import (TreePlan, diagnose, diagnose_run, export_nodes, format_summary, merge_diagnoses, plan_trees,
                        summarize)
from ._node import compositions_of, node_case, root_formula
from ._rules import Downgrades, Rule, Source, number_terms, rules, sources, targets, zoo_expectations
from ._tree import TreeNode, build_tree, draw_tree, tree_json, tree_nodes

__all__ = ["DIAGNOSIS_FILE", "NODES_FILE", "SUMMARY_FILE", "TREES_FILE", "Downgrades", "Rule", "Source", "TreeNode",
           "TreePlan", "attribute", "build_tree", "compositions_of", "diagnose", "diagnose_run", "draw_tree",
           "export_nodes", "format_summary", "merge_diagnoses", "node_case", "number_terms", "pending", "plan_trees", "root_formula", "rules", "sources",
           "UNDETERMINED", "summarize", "summarize_sources", "targets", "tree_json", "tree_nodes", "zoo_expectations"]
