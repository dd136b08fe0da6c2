//go:build unix

package main

import (
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// foreground puts this process in a process group of its own and makes
// that group the foreground of its controlling terminal, when it has one:
// Ctrl-C then interrupts this process (and what it started) alone. Run by
// make dev, it spares make the interrupt: make would stop its recipe and
// exit 130 after the stack had stopped cleanly; it now exits with this
// process, 0. Ctrl-Z is ignored: make, which waits for this process,
// could not resume it. restore gives the terminal back to the group that
// had it.
func foreground() (restore func()) {
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil { // no terminal: nothing to take
		return func() {}
	}
	fd := int(tty.Fd())
	prev, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || unix.Setpgid(0, 0) != nil {
		tty.Close()
		return func() {}
	}
	// A background group may set the terminal's foreground only with
	// SIGTTOU ignored; so may it give it back.
	signal.Ignore(unix.SIGTTOU, unix.SIGTSTP)
	if unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, unix.Getpgrp()) != nil {
		tty.Close()
		return func() {}
	}
	return func() {
		_ = unix.IoctlSetPointerInt(fd, unix.TIOCSPGRP, prev)
		tty.Close()
	}
}
