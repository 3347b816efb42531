#!/usr/bin/env python3
"""A helm-like command line over helm-python-sdk (Helm v4's Go SDK), for tests: each call prints one JSON document.

    target/helm-venv/bin/python tests/helm/helm.py lint CHART [--set-json JSON]
    ... template CHART NAME [-n NS] [--set-json JSON]              # {"<template path>": "<manifest>", ...}
    ... install CHART NAME --kubeconfig K [-n NS] [--set-json JSON] [--wait MODE] [--timeout S]
    ... upgrade CHART NAME --kubeconfig K [-n NS] [--set-json JSON] [--wait MODE] [--timeout S]
    ... uninstall NAME --kubeconfig K [-n NS] [--wait MODE] [--timeout S]
    ... status NAME --kubeconfig K [-n NS]

Values are one JSON object (`--set-json '{"replicas": 2}'`). `--wait` is Helm v4's wait strategy: `watcher`
(kstatus, the CLI's `--wait`), `legacy`, `hookOnly` (the CLI's default: wait for hooks only). Success prints the
SDK's result and exits 0; a Helm error prints `{"error": "<Helm's message>", "type": "<exception class>"}` and
exits 1; bad usage exits 2.
"""
import argparse
import json
import sys

import helm_python as helm


def main() -> int:
    parser = argparse.ArgumentParser(prog="helm.py")
    sub = parser.add_subparsers(dest="command", required=True)

    def command(name, *positional, cluster=True, values=True, wait=True):
        p = sub.add_parser(name)
        for arg in positional:
            p.add_argument(arg)
        p.add_argument("-n", "--namespace", default="default")
        if cluster:
            p.add_argument("--kubeconfig", required=True)
            p.add_argument("--kube-context")
        if values:
            p.add_argument("--set-json", default="{}", help="the values, one JSON object")
        if wait:
            p.add_argument("--wait", choices=["watcher", "legacy", "hookOnly"])
            p.add_argument("--timeout", type=int, help="seconds")
        return p

    command("lint", "chart", cluster=False, wait=False)
    command("template", "chart", "name", cluster=False, wait=False)
    command("install", "chart", "name")
    command("upgrade", "chart", "name")
    command("uninstall", "name", values=False)
    command("status", "name", values=False, wait=False)
    args = parser.parse_args()

    try:
        result = run(args)
    except helm.HelmError as e:
        print(json.dumps({"error": e.detail, "type": type(e).__name__}))
        return 1
    print(json.dumps(result))
    return 0


def run(args):
    values = json.loads(args.set_json) if hasattr(args, "set_json") else None
    if args.command == "lint":
        return helm.lint(args.chart, values, namespace=args.namespace, strict=True)
    if args.command == "template":
        with helm.Chart.load(args.chart) as chart:
            return chart.render(values, name=args.name, namespace=args.namespace, is_install=True)
    with helm.Config(
        kubeconfig_path=args.kubeconfig, kube_context=args.kube_context, namespace=args.namespace
    ) as cfg:
        if args.command == "install":
            return cfg.install(args.chart, args.name, values, wait=args.wait, timeout=args.timeout)
        if args.command == "upgrade":
            return cfg.upgrade(args.chart, args.name, values, wait=args.wait, timeout=args.timeout)
        if args.command == "uninstall":
            return cfg.uninstall(args.name, wait=args.wait, timeout=args.timeout)
        return cfg.status(args.name)


if __name__ == "__main__":
    sys.exit(main())
