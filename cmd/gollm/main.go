// Command gollm is the user's entry point to the engine: generate text, serve an
// OpenAI-compatible API, benchmark, and inspect tokenizers.
//
// Each subcommand lives in its own file and registers itself in an init function;
// main only dispatches, wires signals and maps errors to exit codes.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand: its one-line summary and the function that runs it.
// run returns the process exit code; it writes its own diagnostics to stderr.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

var commands = map[string]command{}

// register adds a subcommand; it panics on a duplicate name (a programmer error).
func register(name, summary string, run func(ctx context.Context, args []string, stdout, stderr io.Writer) int) {
	if _, dup := commands[name]; dup {
		panic("gollm: duplicate command " + name)
	}
	commands[name] = command{summary: summary, run: run}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: gollm <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "run 'gollm <command> --help' for a command's flags")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "gollm: unknown command %q\n", args[0])
		usage(stderr)
		return 2
	}
	// The first SIGINT/SIGTERM cancels ctx so the command can drain and exit cleanly;
	// a second one kills the process the usual way.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop()
	}()
	return runCommand(ctx, cmd, args[1:], stdout, stderr)
}

// runCommand runs cmd under ctx, which a signal cancels: a command that fails once ctx has ended was
// interrupted, and exits 130 (128 + SIGINT, as shells report it) rather than with its own error's 1.
// A command that drains and succeeds (serve on SIGTERM) keeps its 0.
func runCommand(ctx context.Context, cmd command, args []string, stdout, stderr io.Writer) int {
	code := cmd.run(ctx, args, stdout, stderr)
	if code == 1 && ctx.Err() != nil {
		return 130
	}
	return code
}
