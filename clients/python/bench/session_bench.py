"""Acquire+release cycles per second through one shared session: N threads
sharing one Session, and N tasks sharing one AsyncSession, each on its own
key, against the lcd at ADDRESS; with --go, N goroutines sharing one
session of the Go client (clients/go) in the same rounds.

    python3 clients/python/bench/session_bench.py ADDRESS [--workers 16] [--seconds 5] [--rounds 3] [--go]

Prints one line per round and mode, then the medians: cycles per second,
and for the Python modes the process's CPU time (user and system) per
cycle, which depends less on what else the machine runs. --go builds the
Go program below with the repository's module (go build, offline)."""

from __future__ import annotations

import argparse
import asyncio
import os
import pathlib
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

import lockingcenter  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def threads(address: str, workers: int, seconds: float) -> tuple[float, float]:
    with lockingcenter.Session(address, name="bench-threads") as session:
        counts = [0] * workers
        start = threading.Barrier(workers + 1)
        stop = threading.Event()

        def work(i: int) -> None:
            key = f"python/bench/t{i}"
            start.wait()
            n = 0
            while not stop.is_set():
                session.acquire(key).release()
                n += 1
            counts[i] = n

        ts = [threading.Thread(target=work, args=(i,)) for i in range(workers)]
        for t in ts:
            t.start()
        start.wait()
        t0, c0 = time.monotonic(), cpu()
        time.sleep(seconds)
        stop.set()
        for t in ts:
            t.join()
        n = sum(counts)
        return n / (time.monotonic() - t0), (cpu() - c0) / n * 1e6


async def tasks(address: str, workers: int, seconds: float) -> tuple[float, float]:
    async with lockingcenter.AsyncSession(address, name="bench-tasks") as session:
        stop = asyncio.Event()
        counts = [0] * workers

        async def work(i: int) -> None:
            key = f"python/bench/a{i}"
            n = 0
            while not stop.is_set():
                lk = await session.acquire(key)
                await lk.release()
                n += 1
            counts[i] = n

        ws = [asyncio.create_task(work(i)) for i in range(workers)]
        t0, c0 = time.monotonic(), cpu()
        await asyncio.sleep(seconds)
        stop.set()
        await asyncio.gather(*ws)
        n = sum(counts)
        return n / (time.monotonic() - t0), (cpu() - c0) / n * 1e6


GO_MAIN = """package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
)

func main() {
	workers, _ := strconv.Atoi(os.Args[2])
	secs, _ := strconv.ParseFloat(os.Args[3], 64)
	ctx := context.Background()
	s, err := lockingcenter.NewSession(ctx, os.Args[1], lockingcenter.WithSource("bench-go"))
	if err != nil {
		panic(err)
	}
	defer s.Close()
	var n atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	start := time.Now()
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("python/bench/go%d", i)
			for !stop.Load() {
				l, err := s.Acquire(ctx, key)
				if err != nil {
					panic(err)
				}
				if err := l.Release(); err != nil {
					panic(err)
				}
				n.Add(1)
			}
		}()
	}
	time.Sleep(time.Duration(secs * float64(time.Second)))
	stop.Store(true)
	wg.Wait()
	fmt.Printf("%.0f\\n", float64(n.Load())/time.Since(start).Seconds())
}
"""


def go_binary() -> str:
    """The Go program above, built in a temporary module that uses the
    repository's (the module cache must hold its dependencies)."""
    root = pathlib.Path(__file__).resolve().parents[3]
    d = tempfile.mkdtemp(prefix="lc-go-bench-")
    pathlib.Path(d, "go.mod").write_text(
        "module gobench\n\ngo 1.26.0\n\nrequire github.com/locking-center/locking-center v0.0.0\n\n"
        f"replace github.com/locking-center/locking-center => {root}\n"
    )
    pathlib.Path(d, "main.go").write_text(GO_MAIN)
    shutil.copy(root / "go.sum", d)
    env = dict(os.environ, GOFLAGS="-mod=mod", GOPROXY="off", GOSUMDB="off")
    subprocess.run(["go", "build", "-o", "gobench", "."], cwd=d, env=env, check=True)
    return os.path.join(d, "gobench")


def go_round(binary: str, address: str, workers: int, seconds: float) -> float:
    out = subprocess.run([binary, address, str(workers), str(seconds)], capture_output=True, text=True, check=True)
    return float(out.stdout)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("address")
    p.add_argument("--workers", type=int, default=16)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--go", action="store_true", help="measure the Go client too, in the same rounds")
    a = p.parse_args()
    got: dict[str, list[float]] = {"threads": [], "asyncio": []}
    spent: dict[str, list[float]] = {"threads": [], "asyncio": []}
    binary = ""
    if a.go:
        binary, got["go"] = go_binary(), []
    for r in range(a.rounds):
        for mode, label, run in (("threads", "threads, one Session", lambda: threads(a.address, a.workers, a.seconds)),
                                 ("asyncio", "tasks, one AsyncSession",
                                  lambda: asyncio.run(tasks(a.address, a.workers, a.seconds)))):  # fmt: skip
            rate, us = run()
            got[mode].append(rate)
            spent[mode].append(us)
            print(f"round {r + 1}: {a.workers} {label}: {rate:,.0f} cycles/s, {us:.0f} µs CPU/cycle", flush=True)
        if binary:
            got["go"].append(go_round(binary, a.address, a.workers, a.seconds))
            print(f"round {r + 1}: {a.workers} goroutines, one Go session: {got['go'][-1]:,.0f} cycles/s", flush=True)
    for mode, xs in got.items():
        cpu_part = f", {statistics.median(spent[mode]):.0f} µs CPU/cycle" if mode in spent else ""
        print(f"median {mode}: {statistics.median(xs):,.0f} cycles/s{cpu_part}")


if __name__ == "__main__":
    main()
