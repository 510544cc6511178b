#!/usr/bin/env python3
"""kvattn generate against llama.cpp on the CPU (issue 21's table), in alternating rounds.

Builds llama.cpp (CPU only) from PyPI's llama-cpp-python source package, which vendors it,
into a folder outside the repository (default /tmp/kvattn-llamacpp), then runs both programs on
the same 128-token prompt of the default model (models/, scripts/fetch_model.sh):
  per round and thread count: one 64-token run each (prefill and decode tok/s as each program
  reports them), then one 1-token run each under /usr/bin/time -v (peak RSS, wall time).
The order of the two programs flips every round. Prints min/median/max per row and the ratio
of medians. A benchmark, not a test: it needs the network (once) and an otherwise idle machine.

  python3 scripts/bench_vs_llamacpp.py --kvattn build/kvattn [--rounds 5] [--threads 1 2]
"""
import argparse
import glob
import json
import os
import re
import statistics
import subprocess
import sys
import tarfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")
SENTENCE = ("The history of the printing press begins in the fifteenth century, when movable "
            "type changed how books were made and how ideas spread across Europe.")


def run(cmd, **kw):
    return subprocess.run(cmd, check=True, text=True, **kw)


def build_llamacpp(work, version):
    """llama-completion and llama-bench of the llama.cpp that llama-cpp-python `version` vendors."""
    bindir = os.path.join(work, "build", "bin")
    if os.path.exists(os.path.join(bindir, "llama-completion")):
        return bindir
    os.makedirs(work, exist_ok=True)
    if not glob.glob(os.path.join(work, "llama_cpp_python-*.tar.gz")):
        # --no-binary only for this package: its build dependencies may stay wheels.
        run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}",
             "--no-binary", "llama-cpp-python", "--no-deps", "-d", work])
    sdist = glob.glob(os.path.join(work, "llama_cpp_python-*.tar.gz"))[0]
    with tarfile.open(sdist) as t:
        t.extractall(work)
    src = glob.glob(os.path.join(work, "llama_cpp_python-*", "vendor", "llama.cpp"))[0]
    # Not GGML_NATIVE: on an AMX CPU it builds ggml's AMX matmul, which crashed (SIGSEGV in
    # ggml_backend_amx_mul_mat at the warm-up) on the 2-core VM of issue 21; the ISA flags
    # this CPU reports instead, AMX left out.
    with open("/proc/cpuinfo") as f:
        have = set(next(l for l in f if l.startswith("flags")).split(":")[1].split())
    isa = {"AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "BMI2": "bmi2",
           "AVX_VNNI": "avx_vnni", "AVX512": "avx512f", "AVX512_VNNI": "avx512_vnni",
           "AVX512_BF16": "avx512_bf16", "AVX512_VBMI": "avx512vbmi"}
    run(["cmake", "-S", src, "-B", os.path.join(work, "build"), "-G", "Ninja",
         "-DCMAKE_BUILD_TYPE=Release", "-DGGML_NATIVE=OFF", "-DGGML_CUDA=OFF"]
        + [f"-DGGML_{k}={'ON' if v in have else 'OFF'}" for k, v in isa.items()] + [
         "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
         "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=OFF"])
    run(["cmake", "--build", os.path.join(work, "build"), "--target", "llama-completion",
         "llama-bench", "-j", str(os.cpu_count())])
    return bindir


def llama_cmd(bindir, prompt, threads, n):
    return [os.path.join(bindir, "llama-completion"), "-m", MODEL, "-p", prompt, "-n", str(n),
            "-t", str(threads), "-tb", str(threads), "-c", "4096", "--temp", "0", "-s", "0",
            "--ignore-eos", "-no-cnv", "--no-display-prompt"]


def kvattn_cmd(binary, prompt, threads, n):
    return [binary, "generate", "-q", "--no-chat", "--threads", str(threads), "-n", str(n),
            "--ignore-eos", "--ctx-size", "4096", prompt]


def llama_rates(err):
    p = re.search(r"prompt eval time =.*?/\s*(\d+) tokens.*?([\d.]+) tokens per second", err)
    d = re.search(r"\beval time =.*?/\s*(\d+) runs.*?([\d.]+) tokens per second", err)
    return int(p.group(1)), float(p.group(2)), float(d.group(2))


def kvattn_rates(err):
    m = re.search(r"prefill: ([\d.]+) tok/s, decode: ([\d.]+) tok/s", err)
    return float(m.group(1)), float(m.group(2))


def timed(cmd):
    """(wall seconds, peak RSS MB) of one run under /usr/bin/time -v."""
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, text=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, check=True)
    wall = re.search(r"Elapsed \(wall clock\) time.*: (?:(\d+):)?(\d+):([\d.]+)", r.stderr)
    secs = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3))
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    return secs, rss / 1000.0


def token_count(binary, text):
    r = run([binary, "generate", "--no-chat", "-n", "1", "--json", "-", text],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return len(json.loads(r.stdout.splitlines()[0])["prompt_token_ids"])


def prompt_of(binary, tokens):
    """The SENTENCE repeated, cut to exactly `tokens` tokens by kvattn's tokenizer."""
    words = " ".join([SENTENCE] * (tokens // 20 + 2)).split(" ")
    lo, hi = 1, len(words)  # the fewest words giving >= tokens tokens
    while lo < hi:
        mid = (lo + hi) // 2
        if token_count(binary, " ".join(words[:mid])) >= tokens:
            hi = mid
        else:
            lo = mid + 1
    cut = " ".join(words[:lo])
    n = token_count(binary, cut)
    if n != tokens:
        sys.exit(f"bench_vs_llamacpp: no cut of the sentence has {tokens} tokens (closest {n})")
    return cut


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kvattn", default=os.path.join(ROOT, "build", "kvattn"))
    ap.add_argument("--llamacpp-dir", default="/tmp/kvattn-llamacpp",
                    help="where llama.cpp is fetched and built (outside the repository)")
    ap.add_argument("--llamacpp-bin", help="an existing llama.cpp bin/ folder (skips the build)")
    ap.add_argument("--llama-cpp-python", default="0.3.36", help="the sdist version to build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--prompt-tokens", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=64)
    a = ap.parse_args()

    bindir = a.llamacpp_bin or build_llamacpp(a.llamacpp_dir, a.llama_cpp_python)
    prompt = prompt_of(a.kvattn, a.prompt_tokens)
    rows = {}  # (row name, program) -> list of values

    def add(name, prog, v):
        rows.setdefault((name, prog), []).append(v)

    for rnd in range(a.rounds):
        order = ["llama.cpp", "kvattn"] if rnd % 2 == 0 else ["kvattn", "llama.cpp"]
        for t in a.threads:
            for prog in order:
                if prog == "llama.cpp":
                    err = subprocess.run(llama_cmd(bindir, prompt, t, a.new_tokens), text=True,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         check=True).stderr
                    n, pre, dec = llama_rates(err)
                    if n != a.prompt_tokens:
                        sys.exit(f"bench_vs_llamacpp: llama.cpp saw {n} prompt tokens, "
                                 f"kvattn {a.prompt_tokens}")
                else:
                    err = subprocess.run(kvattn_cmd(a.kvattn, prompt, t, a.new_tokens), text=True,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                         check=True).stderr
                    pre, dec = kvattn_rates(err)
                add(f"prefill, {t} thread(s), tok/s", prog, pre)
                add(f"decode, {t} thread(s), tok/s", prog, dec)
        for prog in order:
            cmd = (llama_cmd(bindir, prompt, 1, 1) if prog == "llama.cpp"
                   else kvattn_cmd(a.kvattn, prompt, 1, 1))
            secs, mb = timed(cmd)
            add("1-token run, 1 thread, wall s", prog, secs)
            add("peak RSS, 1-token run, MB", prog, mb)
        print(f"round {rnd + 1}/{a.rounds} done", file=sys.stderr)

    def fmt(v):
        return f"{v:.2f}" if v < 10 else f"{v:.0f}"

    print(f"| {a.rounds} rounds, min / median / max | llama.cpp | kvattn | ratio of medians |")
    print("|---|---|---|---|")
    names = list(dict.fromkeys(name for name, _ in rows))
    for name in names:
        cells = []
        for prog in ("llama.cpp", "kvattn"):
            v = rows[(name, prog)]
            cells.append(f"{fmt(min(v))} / {fmt(statistics.median(v))} / {fmt(max(v))}")
        ratio = (statistics.median(rows[(name, "kvattn")])
                 / statistics.median(rows[(name, "llama.cpp")]))
        print(f"| {name} | {cells[0]} | {cells[1]} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
