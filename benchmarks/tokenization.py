"""Tokenization benchmark: chats, prompt/completion pairs and plain text through ``packing.encode_rows``.

One command, from the repository root::

    python benchmarks/tokenization.py            # 100,000 chats, 3 interleaved runs: a few minutes on two cores
    python benchmarks/tokenization.py --quick    # 2,000 chats, seconds: checks that everything runs

Nothing is downloaded: a byte-level BPE (vocabulary 4,096) is trained on the synthetic corpus first
(not timed), saved with two chat templates (ChatML without generation markers, so masks come from
each turn located in the one rendering; and the same with ``{% generation %}`` markers, so masks come from
``return_assistant_tokens_mask``) and loaded by path. The chats are synthetic (numpy
``default_rng(0)``): an optional system message, then 1 to 3 user/assistant pairs of log-normal length.

Each case is timed against a baseline in the same run, the two measured alternately, medians of
``--repeat`` runs: for chats, ``apply_chat_template(tokenize=True)`` over the same conversations (ids
only, no masks: what a trainer calls without per-turn masks); for text, one batch call of the tokenizer
on the same strings. The report is Markdown on stdout; progress goes to stderr.
"""

from __future__ import annotations

import os
import sys

# run as a script, this file's folder comes first on the path, where this file would hide the standard
# library's `tokenize` module (which numpy and inspect import): take the folder off before anything else
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _HERE]

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `python benchmarks/tokenization.py` puts benchmarks/, not the root, on the path
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from packing.text._text_rows import encode_rows  # noqa: E402
from packing.text._tokenizers import load_tokenizer  # noqa: E402

CHATML = (
    "{%- for m in messages -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
MARKED = (
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}"
    "{{- '<|im_start|>assistant\\n' -}}{% generation %}{{- m['content'] + '<|im_end|>' + '\\n' -}}{% endgeneration %}"
    "{%- else -%}"
    "{{- '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>' + '\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>", "<|im_start|>", "<|im_end|>"]


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def make_chats(count: int, seed: int = 0) -> list[list[dict[str, str]]]:
    """Synthetic conversations: words from a fixed random vocabulary (a few with non-ASCII letters)."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocabulary = ["".join(rng.choice(letters, size=int(n))) for n in rng.integers(1, 10, size=3000)]
    vocabulary += ["café", "naïve", "日本語", "Größe", "señor", "✓", "2+2=4", "?", "!", "."]
    cumulative = np.cumsum(1.0 / np.arange(1, len(vocabulary) + 1))
    cumulative /= cumulative[-1]  # Zipf's law over the vocabulary

    def sentence(median_words: float) -> str:
        n = max(1, int(rng.lognormal(np.log(median_words), 0.7)))
        picks = np.minimum(np.searchsorted(cumulative, rng.random(n)), len(vocabulary) - 1)
        return " ".join(vocabulary[i] for i in picks.tolist())

    chats = []
    for _ in range(count):
        chat = [{"role": "system", "content": sentence(8)}] if rng.random() < 0.3 else []
        for _ in range(int(rng.integers(1, 4))):
            chat += [{"role": "user", "content": sentence(20)}, {"role": "assistant", "content": sentence(40)}]
        chats.append(chat)
    return chats


def build_tokenizers(chats: list[list[dict[str, str]]], folder: Path) -> tuple[Any, Any]:
    """A byte-level BPE trained on the chats' text, saved with each template and loaded back by path."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=4096,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    backend.train_from_iterator((m["content"] for chat in chats[:5000] for m in chat), trainer)
    wrapper: Any = PreTrainedTokenizerFast
    loaded = []
    for name, template in (("chatml", CHATML), ("marked", MARKED)):
        tokenizer = wrapper(
            tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|pad|>", chat_template=template
        )
        tokenizer.save_pretrained(str(folder / name))
        loaded.append(load_tokenizer(str(folder / name)))
    return loaded[0], loaded[1]


def cpu_seconds() -> float:
    """CPU time of this process (every thread) and of its finished children: what a shared machine's load
    does not inflate the way it inflates wall time."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def median_time(call: Callable[[], Any], cpu: list[float] | None = None) -> float:
    start, start_cpu = time.perf_counter(), cpu_seconds()
    call()
    if cpu is not None:
        cpu.append(cpu_seconds() - start_cpu)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 chats: checks that everything runs")
    parser.add_argument("--chats", type=int, help="number of chats (default 100,000; 2,000 with --quick)")
    parser.add_argument("--repeat", type=int, help="interleaved runs per case (default 3; 2 with --quick)")
    parser.add_argument(
        "--only",
        help="comma-separated case keys: prefix, markers, bytes, proc2, proc2serial, pairs, text (default: all)",
    )
    args = parser.parse_args(argv)
    count = args.chats or (2000 if args.quick else 100_000)
    repeat = args.repeat or (2 if args.quick else 3)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "true")

    say(f"making {count:,} chats")
    chats = make_chats(count)
    with tempfile.TemporaryDirectory() as folder:
        say("training the BPE tokenizer (not timed)")
        chatml, marked = build_tokenizers(chats, Path(folder))
        messages = [{"messages": chat} for chat in chats]
        pairs = [{"prompt": chat[-2]["content"], "completion": chat[-1]["content"]} for chat in chats]
        texts = [{"text": "\n".join(m["content"] for m in chat)} for chat in chats]
        conversations = chats

        def chat_baseline(tokenizer: Any) -> Callable[[], Any]:
            return lambda: tokenizer.apply_chat_template(conversations, tokenize=True, return_dict=False)

        def text_baseline(column: list[str]) -> Callable[[], Any]:
            return lambda: chatml(column, return_attention_mask=False)

        def one_process(tokenizer: Any, parallelism: str = "true") -> Callable[[], Any]:
            def call() -> Any:
                before = os.environ["TOKENIZERS_PARALLELISM"]
                os.environ["TOKENIZERS_PARALLELISM"] = parallelism  # read by the Rust tokenizer at each call
                try:
                    return encode_rows(messages, tokenizer)
                finally:
                    os.environ["TOKENIZERS_PARALLELISM"] = before

            return call

        cases: list[tuple[str, str, list[Any], Any, str, Callable[[], Any] | None]] = [
            ("prefix", "messages, BPE, template without markers (turns located in one rendering)", messages, chatml,
             "apply_chat_template", chat_baseline(chatml)),
            ("markers", "messages, BPE, template with {% generation %}", messages, marked, "apply_chat_template",
             chat_baseline(marked)),
            ("bytes", "messages, bytes tokenizer", messages, "bytes", "", None),
            ("proc2", "messages, BPE, no markers, num_proc=2", messages, chatml, "encode_rows, one process",
             one_process(chatml)),
            ("proc2serial", "messages, BPE, no markers, num_proc=2", messages, chatml,
             "encode_rows, one process, one Rust thread", one_process(chatml, "false")),
            ("pairs", "prompt/completion text, BPE", pairs, chatml, "tokenizer(prompts + completions)",
             text_baseline([p["prompt"] for p in pairs] + [p["completion"] for p in pairs])),
            ("text", "text, BPE", texts, chatml, "tokenizer(texts)", text_baseline([t["text"] for t in texts])),
        ]  # fmt: skip
        chosen = set(args.only.split(",")) if args.only else {case[0] for case in cases}
        results = []
        for key, name, rows, tokenizer, baseline_name, baseline in cases:
            if key not in chosen:
                continue
            say(f"{name}: warm-up")
            procs = 2 if key.startswith("proc2") else None
            tokens, mask, _ = encode_rows(rows[:200], tokenizer)
            if baseline is not None:
                baseline()  # the template compiles and caches on first use
            times: list[float] = []
            base_times: list[float] = []
            cpu: list[float] = []
            base_cpu: list[float] = []
            for run in range(repeat):
                say(f"{name}: run {run + 1}/{repeat}")
                start, start_cpu = time.perf_counter(), cpu_seconds()
                tokens, mask, _ = encode_rows(rows, tokenizer, num_proc=procs)
                times.append(time.perf_counter() - start)
                cpu.append(cpu_seconds() - start_cpu)
                if baseline is not None:
                    base_times.append(median_time(baseline, base_cpu))
            cpu_ratio = statistics.median(cpu) / statistics.median(base_cpu) if base_cpu else None
            results.append((name, len(rows), len(tokens), int(mask.sum()), times, baseline_name, base_times, cpu_ratio))

    print(f"# Tokenization benchmark ({'quick' if args.quick else 'full'})")
    print()
    print(f"- {count:,} synthetic chats, {repeat} interleaved runs, medians; {platform.machine()}, "
          f"{os.cpu_count()} cores, Python {platform.python_version()}")  # fmt: skip
    import tokenizers
    import transformers

    print(f"- load average at the end: {', '.join(f'{x:.1f}' for x in os.getloadavg())} (1, 5, 15 min)")
    print(f"- TOKENIZERS_PARALLELISM={os.environ['TOKENIZERS_PARALLELISM']} (one process: the Rust tokenizer's threads;"
          " num_proc workers: one thread each)")  # fmt: skip
    print(f"- transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, numpy {np.__version__}")
    print()
    header = ["case", "rows", "tokens", "trained", "time (median, min–max)", "rows/s", "tokens/s", "baseline", "ratio",
              "CPU ratio"]  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, rows_count, token_count, trained, times, baseline_name, base_times, cpu_ratio in results:
        median = statistics.median(times)
        cells = [
            name,
            f"{rows_count:,}",
            f"{token_count:,}",
            f"{trained:,}",
            f"{median:.2f} s ({min(times):.2f}–{max(times):.2f})",
            f"{rows_count / median:,.0f}",
            f"{token_count / median:,.0f}",
        ]
        if base_times:
            base = statistics.median(base_times)
            cells += [f"{baseline_name}: {base:.2f} s", f"{median / base:.2f}×", f"{cpu_ratio:.2f}×"]
        else:
            cells += ["—", "—", "—"]
        print("| " + " | ".join(cells) + " |")
    print()
    print("ratio: encode_rows time / baseline time (ids and exact loss masks vs. ids only; for num_proc=2, vs. the")
    print(
        "same call in one process (with the Rust tokenizer's threads, or with one thread: TOKENIZERS_PARALLELISM=false),"
    )
    print("so 0.625 or less is 1.6x faster). CPU ratio: the same with CPU seconds (all")
    print("threads, and finished child processes) instead of wall time, which a loaded machine inflates less.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
