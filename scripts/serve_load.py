#!/usr/bin/env python3
"""Load benchmark for `kvattn serve` (or any OpenAI-compatible server), with the official
`openai` client (AsyncOpenAI, streamed completions).

The workload is `kvattn bench`'s nano-vllm workload, request for request: --num-requests
prompts of random token ids in [0, --max-token-id), lengths uniform in [--min-input,
--max-input], each asking for a length uniform in [--min-output, --max-output] tokens with
ignore_eos, sampled at temperature 0.6. The draws repeat bench's exactly (std::mt19937 and
libstdc++'s uniform_int_distribution, in bench's order, capped to the served max_model_len as
bench caps them), so the first rate replays the very prompts `kvattn bench --seed S` runs.
Rate i draws with seed S + i: later rates get fresh prompts, never prefix-cache hits from an
earlier rate. Only the sampling seeds differ from bench's (the server draws one per request).

Each rate in --rates replays its workload once: "inf" sends all --num-requests requests at
once (full concurrency, capped by --max-concurrency), a number is a Poisson arrival rate in
requests/s for --rate-requests requests (default: as many; exponential gaps from
random.Random(S + 1000 + i), arrival times fixed in advance).
The requests are spread over --procs client processes (round robin; each runs its own event
loop): one process of the openai client parsed about 10k streamed chunks/s (measured on the
CPU machine), and a GPU server sends one chunk per token, ~20k/s.

Per rate it reports request throughput, output tok/s (usage tokens over the time from the
first send to the last response), time to first token (from each request's send) and
inter-token latency (p50 / p90 / p99; the gap between consecutive streamed chunks that carry
tokens), with a progress bar on stderr; --json writes every figure, --plot a PNG of latency
against request rate (needs matplotlib; without it the figures are still written, and
--plot-from JSON draws the PNG later on any machine that has it).

  python3 scripts/serve_load.py --base-url http://127.0.0.1:8000 --rates inf,4,8,16 \\
      --json out/serve_load.json --plot out/serve_load.png
  python3 scripts/serve_load.py --plot-from out/serve_load.json --plot out/serve_load.png
"""
import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.connection
import os
import random
import sys
import time
import urllib.request


def percentile(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


class StdMt19937:
    """std::mt19937(seed) draws, with libstdc++'s uniform_int_distribution (GCC >= 11: Lemire's
    nearly divisionless reduction of one 32-bit draw). Python's random is the same generator;
    only the seeding differs, so the C++ state is computed here and set."""

    def __init__(self, seed):
        mt = [seed & 0xFFFFFFFF]
        for i in range(1, 624):
            mt.append((1812433253 * (mt[-1] ^ (mt[-1] >> 30)) + i) & 0xFFFFFFFF)
        self.rng = random.Random()
        self.rng.setstate((3, tuple(mt) + (624,), None))

    def uniform(self, a, b):  # inclusive, b - a < 2**32 - 1
        r = b - a + 1
        product = self.rng.getrandbits(32) * r
        low = product & 0xFFFFFFFF
        if low < r:
            threshold = ((1 << 32) - r) % r
            while low < threshold:
                product = self.rng.getrandbits(32) * r
                low = product & 0xFFFFFFFF
        return a + (product >> 32)


def workload(a, n_requests, seed, context):
    """bench_workload.cpp's make_workload (no shared prefix): prompt lengths and ids first,
    then every output length; prompts capped to context - 1, outputs to what is left."""
    rng = StdMt19937(seed)
    prompts = []
    for _ in range(n_requests):
        n = min(rng.uniform(a.min_input, a.max_input), context - 1)
        prompts.append([rng.uniform(0, a.max_token_id - 1) for _ in range(n)])
    outputs = [min(rng.uniform(a.min_output, a.max_output), context - len(p)) for p in prompts]
    return prompts, outputs


def arrivals(n, rate, seed):
    if rate == float("inf"):
        return [0.0] * n
    rng, t, out = random.Random(seed), 0.0, []
    for _ in range(n):
        out.append(t)
        t += rng.expovariate(rate)
    return out


class Progress:
    def __init__(self, total, label):
        self.total, self.done, self.label = total, 0, label
        self.t0 = time.time()
        self.tty = sys.stderr.isatty()
        self.last = 0.0

    def step(self):
        self.done += 1
        now = time.time()
        if self.done == self.total or now - self.last > (0.1 if self.tty else 5.0):
            self.last = now
            w = 30
            fill = w * self.done // self.total
            line = (f"{self.label} [{'#' * fill}{'.' * (w - fill)}] {self.done}/{self.total} "
                    f"{now - self.t0:6.1f}s")
            sys.stderr.write(("\r" + line) if self.tty else (line + "\n"))
            if self.tty and self.done == self.total:
                sys.stderr.write("\n")
            sys.stderr.flush()


# --- client processes -----------------------------------------------------------------------

async def one_request(client, job, req, sem, conn):
    idx, at, prompt, max_tokens = req
    await asyncio.sleep(max(0.0, job["t0"] + at - time.monotonic()))
    async with sem:
        start = time.monotonic()
        first, last, gaps, tokens, error = None, None, [], 0, None
        try:
            stream = await client.completions.create(
                model=job["model"], prompt=prompt, max_tokens=max_tokens,
                temperature=job["temperature"], stream=True,
                stream_options={"include_usage": True}, extra_body=job["extra_body"])
            async for chunk in stream:
                now = time.monotonic()
                if chunk.usage is not None:
                    tokens = chunk.usage.completion_tokens
                if not chunk.choices:
                    continue
                c = chunk.choices[0]
                if not c.text and not (c.model_extra or {}).get("token_ids"):
                    continue
                if first is None:
                    first = now
                else:
                    gaps.append(now - last)
                last = now
        except Exception as e:  # noqa: BLE001 - reported, not raised
            error = repr(e)
        end = time.monotonic()
    conn.send(("tick",))
    return {"index": idx, "start": start, "ttft": (first - start) if first else None,
            "itl": gaps, "tokens": tokens, "end": end, "error": error}


async def run_job(job, conn):
    import openai
    client = openai.AsyncOpenAI(base_url=job["base_url"], api_key=job["api_key"],
                                max_retries=0, timeout=3600)
    conn.send(("armed",))
    job["t0"] = conn.recv()  # the same first-arrival time in every process
    sem = asyncio.Semaphore(job["max_concurrency"])
    results = await asyncio.gather(*(one_request(client, job, r, sem, conn)
                                     for r in job["requests"]))
    await client.close()
    return results


def worker(conn):
    try:
        import openai  # noqa: F401 - fail here, once, with a clear message
    except ImportError as e:
        conn.send(("error", f"cannot import openai: {e}"))
        return
    conn.send(("ready",))
    while True:
        job = conn.recv()
        if job is None:
            return
        conn.send(("results", asyncio.run(run_job(job, conn))))


class Clients:
    """--procs worker processes, kept across rates (each imports openai once)."""

    def __init__(self, n):
        ctx = multiprocessing.get_context("fork")
        self.conns, self.procs = [], []
        for _ in range(n):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=worker, args=(child,), daemon=True)
            p.start()
            self.conns.append(parent)
            self.procs.append(p)
        for c in self.conns:
            msg = c.recv()
            if msg[0] != "ready":
                sys.exit(f"serve_load: {msg[1]} (pip install openai)")

    def run(self, jobs, progress):
        """Returns every request's result and the time of the first arrival."""
        for c, job in zip(self.conns, jobs):
            c.send(job)
        for c in self.conns:
            assert c.recv() == ("armed",)
        t0 = time.monotonic() + 0.05
        for c in self.conns:
            c.send(t0)
        results, pending = [], set(self.conns)
        while pending:
            for c in multiprocessing.connection.wait(list(pending)):
                msg = c.recv()
                if msg[0] == "tick":
                    progress.step()
                else:
                    results += msg[1]
                    pending.discard(c)
        return results, t0

    def close(self):
        for c in self.conns:
            c.send(None)
        for p in self.procs:
            p.join(timeout=10)


def run_rate(clients, server, rate, i, a):
    seed = a.seed + i
    n_requests = a.num_requests if rate == float("inf") else a.rate_requests
    prompts, outputs = workload(a, n_requests, seed, server["max_model_len"])
    at = arrivals(len(prompts), rate, a.seed + 1000 + i)
    # return_token_ids (kvattn, vLLM): a chunk per token even while text is held back.
    extra_body = {"ignore_eos": True} | ({} if a.no_token_ids else {"return_token_ids": True})
    n = len(clients.conns)
    jobs = [{"base_url": server["base_url"], "api_key": a.api_key, "model": server["model"],
             "temperature": a.temperature, "extra_body": extra_body,
             "max_concurrency": max(1, -(-a.max_concurrency // n)),
             "requests": [(j, at[j], prompts[j], outputs[j]) for j in range(w, len(prompts), n)]}
            for w in range(n)]
    results, t0 = clients.run(jobs, Progress(len(prompts), f"rate {rate}"))
    wall = max(r["end"] for r in results) - t0
    ok = [r for r in results if r["error"] is None]
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    itl = [g for r in ok for g in r["itl"]]
    out_tokens = sum(r["tokens"] for r in ok)
    return {
        "rate": "inf" if rate == float("inf") else rate,
        "workload_seed": seed,
        "requests": len(results), "failed": len(results) - len(ok),
        "errors": sorted({r["error"] for r in results if r["error"]})[:5],
        "prompt_tokens": sum(len(p) for p in prompts),
        "max_tokens": sum(outputs),
        "wall_s": wall,
        "request_throughput": len(ok) / wall,
        "output_tok_s": out_tokens / wall,
        "output_tokens": out_tokens,
        "ttft_ms": {f"p{p}": 1e3 * percentile(ttft, p) for p in (50, 90, 99)},
        "itl_ms": {f"p{p}": 1e3 * percentile(itl, p) for p in (50, 90, 99)},
    }


# --- server, report, plot -------------------------------------------------------------------

def http_json(url, api_key, body=None):
    req = urllib.request.Request(url, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Authorization": f"Bearer {api_key}",
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def describe_server(a):
    base = a.base_url.rstrip("/") + "/v1"
    models = http_json(base + "/models", a.api_key)["data"]
    m = next((x for x in models if x["id"] == a.model), None) if a.model else models[0]
    if m is None:
        sys.exit(f"serve_load: model '{a.model}' not served (served: {[x['id'] for x in models]})")
    context = int(m.get("max_model_len") or a.max_model_len or 1 << 31)
    return {"base_url": base, "model": m["id"], "max_model_len": context}


def warm_up(server, a):
    """One short request first, as bench's warm-up (first-call costs stay out of the figures)."""
    rng = random.Random(a.seed + 2000)
    http_json(server["base_url"] + "/completions", a.api_key,
              {"model": server["model"], "max_tokens": 8, "ignore_eos": True,
               "prompt": [rng.randrange(a.max_token_id) for _ in range(64)]})


def print_table(model, a, rows):
    print(f"\nmodel {model}, {a.num_requests} requests at inf, {a.rate_requests} per finite "
          f"rate, input {a.min_input}-"
          f"{a.max_input}, output {a.min_output}-{a.max_output}, {a.procs} client processes")
    print(f"{'rate':>6} {'req/s':>7} {'out tok/s':>10} {'TTFT p50/p90/p99 ms':>24} "
          f"{'ITL p50/p90/p99 ms':>22} {'failed':>6}")
    for r in rows:
        t, i = r["ttft_ms"], r["itl_ms"]
        print(f"{str(r['rate']):>6} {r['request_throughput']:7.2f} {r['output_tok_s']:10.1f} "
              f"{t['p50']:8.1f}/{t['p90']:.1f}/{t['p99']:.1f} "
              f"{i['p50']:8.2f}/{i['p90']:.2f}/{i['p99']:.2f} {r['failed']:6d}")
        for e in r["errors"]:
            print(f"       error: {e[:200]}")


def plot(rows, path, title=""):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"serve_load: matplotlib is not installed; no plot written to {path} (the JSON has "
              f"every figure: --plot-from it where matplotlib is)", file=sys.stderr)
        return False
    finite = [r for r in rows if r["rate"] != "inf"]
    if not finite:
        print("serve_load: no finite rate to plot", file=sys.stderr)
        return False
    x = [r["rate"] for r in finite]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, name in ((axes[0], "ttft_ms", "time to first token"),
                          (axes[1], "itl_ms", "inter-token latency")):
        for p in ("p50", "p90", "p99"):
            ax.plot(x, [r[key][p] for r in finite], marker="o", label=p)
        ax.set_xlabel("request rate (req/s, Poisson)")
        ax.set_ylabel("ms")
        ax.set_title(name)
        ax.grid(True, alpha=0.3)
        ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"serve_load: plot written to {path}", file=sys.stderr)
    return True


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--api-key", default="none")
    p.add_argument("--model", default="", help="served model id (default: the first listed)")
    p.add_argument("--rates", default="inf", help="comma-separated: inf or requests/s")
    p.add_argument("--num-requests", type=int, default=256)
    p.add_argument("--rate-requests", type=int, default=0,
                   help="requests per finite rate (default: --num-requests)")
    p.add_argument("--min-input", type=int, default=100)
    p.add_argument("--max-input", type=int, default=1024)
    p.add_argument("--min-output", type=int, default=100)
    p.add_argument("--max-output", type=int, default=1024)
    p.add_argument("--max-token-id", type=int, default=10000,
                   help="ids in [0, this): bench's min(10000, vocabulary)")
    p.add_argument("--max-model-len", type=int, default=0,
                   help="cap as bench does when /v1/models gives no max_model_len (0: no cap)")
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--seed", type=int, default=0, help="bench's --seed (std::mt19937)")
    p.add_argument("--max-concurrency", type=int, default=100000)
    p.add_argument("--procs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                   help="client processes (default: half the cores, at most 8)")
    p.add_argument("--no-warmup", action="store_true", help="skip the one short warm-up request")
    p.add_argument("--no-token-ids", action="store_true",
                   help="do not ask for return_token_ids (servers without the extension)")
    p.add_argument("--json", default="")
    p.add_argument("--plot", default="")
    p.add_argument("--plot-from", default="",
                   help="draw --plot from this --json file and exit (no server needed)")
    a = p.parse_args()
    if a.plot_from:
        if not a.plot:
            p.error("--plot-from needs --plot")
        return a
    a.rates = [float(r) for r in a.rates.split(",")]
    a.rate_requests = a.rate_requests or a.num_requests
    if (a.min_input < 1 or a.min_input > a.max_input or a.min_output < 1
            or a.min_output > a.max_output or a.num_requests < 1 or a.rate_requests < 1
            or a.procs < 1
            or a.max_token_id < 1 or any(r <= 0 for r in a.rates)):
        p.error("need --num-requests, --procs, --max-token-id >= 1, rates > 0, "
                "1 <= --min-input <= --max-input, 1 <= --min-output <= --max-output")
    a.procs = min(a.procs, a.num_requests, a.rate_requests)
    return a


def main():
    a = parse_args()
    if a.plot_from:
        with open(a.plot_from) as f:
            j = json.load(f)
        sys.exit(0 if plot(j["results"], a.plot, j.get("model", "")) else 1)
    server = describe_server(a)
    clients = Clients(a.procs)  # before any thread or event loop exists in this process
    if not a.no_warmup:
        warm_up(server, a)
    rows = [run_rate(clients, server, rate, i, a) for i, rate in enumerate(a.rates)]
    clients.close()
    print_table(server["model"], a, rows)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": server["model"], "max_model_len": server["max_model_len"],
                       "args": vars(a) | {"rates": [str(x) for x in a.rates]},
                       "results": rows}, f, indent=2)
    if a.plot:
        plot(rows, a.plot, server["model"])
    sys.exit(1 if any(r["failed"] for r in rows) else 0)


if __name__ == "__main__":
    main()
