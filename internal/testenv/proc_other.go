//go:build !linux

package testenv

import "syscall"

func childAttr() *syscall.SysProcAttr { return nil }
