//go:build unix && !linux

package serve

import "syscall"

// ReadNow is syscall.Read where the raw system call is not used.
func ReadNow(fd int, b []byte) (int, error) { return syscall.Read(fd, b) }

// WriteNow is syscall.Write where the raw system call is not used.
func WriteNow(fd int, b []byte) (int, error) { return syscall.Write(fd, b) }
