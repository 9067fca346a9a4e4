//go:build !linux

package resp

import (
	"errors"
	"net"
)

// Event loops need epoll: elsewhere every connection is served on the goroutine model.

const loopsSupported = false

type loop struct{ task LoopTask }

type loopHooks struct{}

func (s *Server) startLoops(int) error       { return errors.New("resp: event loops need Linux") }
func (s *Server) closeLoops()                {}
func (s *Server) wakeLoops()                 {}
func (s *Server) adopt(*Conn, net.Conn) bool { return false }
func (s *Server) loopOffloads() int64        { return 0 }
func (s *Server) loopTakeovers() int64       { return 0 }
func (lp *loop) handBack(*Conn)              {}
func (lp *loop) resumeHere(*Conn)            {}

// Watch, Unwatch and Wake exist for the portability of the handlers that use them: without
// loops no Loop is ever made.
func (l *Loop) Watch(int, bool) error { return errors.New("resp: event loops need Linux") }
func (l *Loop) Unwatch(int)           {}
func (l *Loop) Wake()                 {}
