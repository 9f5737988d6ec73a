package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
)

// relayedSignals are the signals lc-cli catches: while it waits they stop
// the wait, while `lock --` runs its command they are passed on to it.
var relayedSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT}

// signalCode is the exit code of a process ended by sig: 128+N.
func signalCode(sig os.Signal) exitCode {
	if s, ok := sig.(syscall.Signal); ok {
		return exitSignalBase + exitCode(s)
	}
	return exitFailure
}

// interrupted is the exit of a command that gave up waiting on signal sig.
// what names the request, as in `lock "k" at host:port`; note, if not
// empty, is added to the message.
func interrupted(what string, sig os.Signal, note string) error {
	err := fmt.Errorf("%s: interrupted by signal %v", what, sig)
	if note != "" {
		err = fmt.Errorf("%w; %s", err, note)
	}
	return &exitError{code: signalCode(sig), err: err}
}

// interruptibly runs call, a request to a server, and gives up when a
// signal arrives on sigs: call's context ends (a queued lock request is
// withdrawn) and the signal's exit is returned, also when the signal came
// just as call succeeded. undo, if not nil, then reverts that success: it
// releases a key granted at that very moment. Without a signal, call's
// error is returned as it is. what names the request in messages.
func interruptibly(ctx context.Context, sigs <-chan os.Signal, what string, call func(context.Context) error, undo func() error) error {
	cctx, stop := interruptible(ctx, sigs)
	err := call(cctx)
	sig := stop()
	if sig == nil && err == nil {
		sig = pendingSignal(sigs)
	}
	if sig == nil {
		return err
	}
	if err == nil && undo != nil {
		if uerr := undo(); uerr != nil {
			return interrupted(what, sig, fmt.Sprintf("the key was granted at that moment, and releasing it failed: %v", uerr))
		}
		return interrupted(what, sig, "the key was granted at that moment and has been released")
	}
	return interrupted(what, sig, "")
}

// interruptible returns a context that ends when the first signal arrives
// on sigs, and stop, which ends the watch and returns that signal, or nil
// when none arrived before stop. A nil sigs never interrupts.
func interruptible(parent context.Context, sigs <-chan os.Signal) (context.Context, func() os.Signal) {
	ctx, cancel := context.WithCancel(parent)
	done := make(chan struct{})
	var got os.Signal
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case got = <-sigs:
			cancel()
		case <-done:
		}
	})
	return ctx, func() os.Signal {
		close(done)
		wg.Wait()
		cancel()
		return got
	}
}

// pendingSignal returns a signal that has arrived on sigs and not been
// taken yet, or nil.
func pendingSignal(sigs <-chan os.Signal) os.Signal {
	select {
	case s := <-sigs:
		return s
	default:
		return nil
	}
}
