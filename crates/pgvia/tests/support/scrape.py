"""Fetches a pgvia HTTP endpoint and prints what a real Prometheus client library makes of it.

Usage: scrape.py metrics URL   -> JSON list of samples [name, labels, value], parsed by both
                                  prometheus_client's Prometheus text parser and its
                                  OpenMetrics parser (the two must agree on every sample)
       scrape.py health URL    -> JSON {"status": code, "body": text}
"""
import json
import sys
import urllib.error
import urllib.request


def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def samples(families):
    out = []
    for family in families:
        for s in family.samples:
            out.append([s.name, dict(s.labels), s.value])
    return sorted(out, key=lambda x: (x[0], sorted(x[1].items())))


def main():
    what, url = sys.argv[1], sys.argv[2]
    status, ctype, body = fetch(url)
    if what == "health":
        print(json.dumps({"status": status, "body": body}))
        return
    if status != 200:
        sys.exit(f"HTTP {status}: {body}")
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
    from prometheus_client.parser import text_string_to_metric_families as prom

    strict = samples(om(body))
    # The Prometheus text parser stops at OpenMetrics' "# EOF" no differently from a comment.
    loose = samples(prom(body))
    loose_names = {(n, json.dumps(l, sort_keys=True)): v for n, l, v in loose}
    for n, l, v in strict:
        key = (n, json.dumps(l, sort_keys=True))
        if key not in loose_names or loose_names[key] != v:
            sys.exit(f"parsers disagree on {key}: {v} vs {loose_names.get(key)}")
    print(json.dumps({"content_type": ctype, "samples": strict}))


if __name__ == "__main__":
    main()
