#!/usr/bin/env python3
"""Load benchmark for `kvattn serve` (or any OpenAI-compatible server), with the official
`openai` client (AsyncOpenAI, streamed completions).

The workload is nano-vllm's bench.py (as `kvattn bench`): --num-requests prompts of random
token ids in [0, --max-token-id), lengths uniform in [--min-input, --max-input], each asking
for a length uniform in [--min-output, --max-output] tokens with ignore_eos, sampled at
temperature 0.6; all draws from random.Random(--seed). It is replayed once per rate in
--rates: "inf" sends every request at once (full concurrency, capped by --max-concurrency),
a number is a Poisson arrival rate in requests/s (exponential gaps, seeded).

Per rate it reports request throughput, output tok/s, time to first token and inter-token
latency (p50 / p90 / p99; a gap between consecutive streamed chunks, each one token), with a
progress bar on stderr; --json writes every figure, --plot a PNG of latency against request
rate (needs matplotlib).

  python3 scripts/serve_load.py --base-url http://127.0.0.1:8000 --rates inf,4,8,16 \\
      --json out/serve_load.json --plot out/serve_load.png
"""
import argparse
import asyncio
import json
import random
import sys
import time


def percentile(xs, p):
    if not xs:
        return float("nan")
    s = sorted(xs)
    k = (len(s) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def workload(a):
    rng = random.Random(a.seed)
    prompts = []
    for _ in range(a.num_requests):
        n = rng.randint(a.min_input, a.max_input)
        prompts.append([rng.randrange(a.max_token_id) for _ in range(n)])
    outputs = [rng.randint(a.min_output, a.max_output) for _ in range(a.num_requests)]
    return prompts, outputs


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


async def one_request(client, model, prompt, max_tokens, temperature, extra_body, sem,
                      progress):
    async with sem:
        start = time.perf_counter()
        first, last, gaps, tokens, error = None, None, [], 0, None
        try:
            stream = await client.completions.create(
                model=model, prompt=prompt, max_tokens=max_tokens, temperature=temperature,
                stream=True, stream_options={"include_usage": True},
                extra_body=extra_body)
            async for chunk in stream:
                now = time.perf_counter()
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
        progress.step()
        end = time.perf_counter()
        return {"ttft": (first - start) if first else None, "itl": gaps, "tokens": tokens,
                "latency": end - start, "error": error}


async def run_rate(client, model, prompts, outputs, rate, a):
    sem = asyncio.Semaphore(a.max_concurrency)
    # return_token_ids (kvattn, vLLM): a chunk per token even while text is held back.
    extra_body = {"ignore_eos": True} | ({} if a.no_token_ids else {"return_token_ids": True})
    progress = Progress(len(prompts), f"rate {rate}")
    rng = random.Random(a.seed + 1)
    tasks = []
    t0 = time.perf_counter()
    for p, o in zip(prompts, outputs):
        tasks.append(asyncio.create_task(
            one_request(client, model, p, o, a.temperature, extra_body, sem, progress)))
        if rate != float("inf"):
            await asyncio.sleep(rng.expovariate(rate))
    results = await asyncio.gather(*tasks)
    wall = time.perf_counter() - t0
    ok = [r for r in results if r["error"] is None]
    ttft = [r["ttft"] for r in ok if r["ttft"] is not None]
    itl = [g for r in ok for g in r["itl"]]
    out_tokens = sum(r["tokens"] for r in ok)
    return {
        "rate": "inf" if rate == float("inf") else rate,
        "requests": len(results), "failed": len(results) - len(ok),
        "errors": sorted({r["error"] for r in results if r["error"]})[:5],
        "wall_s": wall,
        "request_throughput": len(ok) / wall,
        "output_tok_s": out_tokens / wall,
        "output_tokens": out_tokens,
        "ttft_ms": {f"p{p}": 1e3 * percentile(ttft, p) for p in (50, 90, 99)},
        "itl_ms": {f"p{p}": 1e3 * percentile(itl, p) for p in (50, 90, 99)},
    }


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"serve_load: matplotlib is not installed; no plot written to {path}",
              file=sys.stderr)
        return
    finite = [r for r in rows if r["rate"] != "inf"]
    if not finite:
        print("serve_load: no finite rate to plot", file=sys.stderr)
        return
    x = [r["rate"] for r in finite]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, title in ((axes[0], "ttft_ms", "time to first token"),
                           (axes[1], "itl_ms", "inter-token latency")):
        for p in ("p50", "p90", "p99"):
            ax.plot(x, [r[key][p] for r in finite], marker="o", label=p)
        ax.set_xlabel("request rate (req/s)")
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"serve_load: plot written to {path}", file=sys.stderr)


async def main_async(a):
    import openai
    client = openai.AsyncOpenAI(base_url=a.base_url.rstrip("/") + "/v1", api_key=a.api_key,
                                max_retries=0, timeout=3600)
    model = a.model or (await client.models.list()).data[0].id
    prompts, outputs = workload(a)
    rows = []
    for rate in a.rates:
        rows.append(await run_rate(client, model, prompts, outputs, rate, a))
    await client.close()
    return model, rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-url", default="http://127.0.0.1:8000")
    p.add_argument("--api-key", default="none")
    p.add_argument("--model", default="", help="served model id (default: the first listed)")
    p.add_argument("--rates", default="inf", help="comma-separated: inf or requests/s")
    p.add_argument("--num-requests", type=int, default=256)
    p.add_argument("--min-input", type=int, default=100)
    p.add_argument("--max-input", type=int, default=1024)
    p.add_argument("--min-output", type=int, default=100)
    p.add_argument("--max-output", type=int, default=1024)
    p.add_argument("--max-token-id", type=int, default=10000)
    p.add_argument("--temperature", type=float, default=0.6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-concurrency", type=int, default=100000)
    p.add_argument("--no-token-ids", action="store_true",
                   help="do not ask for return_token_ids (servers without the extension)")
    p.add_argument("--json", default="")
    p.add_argument("--plot", default="")
    a = p.parse_args()
    a.rates = [float(r) for r in a.rates.split(",")]
    if a.min_input > a.max_input or a.min_output > a.max_output or a.num_requests < 1:
        p.error("need --num-requests >= 1, --min-input <= --max-input, --min-output <= --max-output")
    model, rows = asyncio.run(main_async(a))
    print(f"\nmodel {model}, {a.num_requests} requests, input {a.min_input}-{a.max_input}, "
          f"output {a.min_output}-{a.max_output}")
    print(f"{'rate':>6} {'req/s':>7} {'out tok/s':>10} {'TTFT p50/p90/p99 ms':>24} "
          f"{'ITL p50/p90/p99 ms':>22} {'failed':>6}")
    for r in rows:
        t, i = r["ttft_ms"], r["itl_ms"]
        print(f"{str(r['rate']):>6} {r['request_throughput']:7.2f} {r['output_tok_s']:10.1f} "
              f"{t['p50']:8.1f}/{t['p90']:.1f}/{t['p99']:.1f} "
              f"{i['p50']:8.2f}/{i['p90']:.2f}/{i['p99']:.2f} {r['failed']:6d}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"model": model, "args": vars(a) | {"rates": [str(x) for x in a.rates]},
                       "results": rows}, f, indent=2)
    if a.plot:
        plot(rows, a.plot)
    sys.exit(1 if any(r["failed"] for r in rows) else 0)


if __name__ == "__main__":
    main()
