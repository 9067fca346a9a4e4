package handlers

import (
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/leafd/leafd/resp"
)

// Connection and client-compatibility commands: what redis-cli, redis-benchmark and client
// libraries send on connect, with replies they accept.

func cmdPing(h *Handler, c *resp.Conn, args [][]byte) error {
	if len(args) > 2 {
		return replyError("ERR wrong number of arguments for 'ping' command")
	}
	if len(args) == 2 {
		c.WriteBulk(args[1])
		return nil
	}
	c.WriteSimple("PONG")
	return nil
}

func cmdEcho(h *Handler, c *resp.Conn, args [][]byte) error {
	c.WriteBulk(args[1])
	return nil
}

func cmdQuit(h *Handler, c *resp.Conn, args [][]byte) error {
	c.WriteSimple("OK")
	c.CloseAfterReply()
	return nil
}

func cmdSelect(h *Handler, c *resp.Conn, args [][]byte) error {
	db, err := parseInt(args[1])
	if err != nil {
		return err
	}
	if db != 0 {
		return replyError("ERR DB index is out of range")
	}
	c.WriteSimple("OK")
	return nil
}

func cmdAuth(h *Handler, c *resp.Conn, args [][]byte) error {
	if len(args) > 3 {
		return errSyntax
	}
	if err := h.auth(c, args[1:]); err != nil {
		return err
	}
	c.WriteSimple("OK")
	return nil
}

// auth checks [user] pass. Only the "default" user exists. Without a password configured
// it takes any password given with the user name, as Redis's nopass default user does (a
// client configured with a password still connects); a password alone is an error.
func (h *Handler) auth(c *resp.Conn, creds [][]byte) error {
	if len(creds) == 2 && string(creds[0]) != "default" {
		if c.PasswordRequired() {
			c.NoteAuthFailure()
			h.authFailed(c)
		}
		return replyError("WRONGPASS invalid username-password pair or user is disabled.")
	}
	if !c.PasswordRequired() {
		if len(creds) == 2 {
			return nil
		}
		return replyError("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	}
	pass := creds[len(creds)-1]
	if !c.Authenticate(pass) {
		h.authFailed(c)
		return replyError("WRONGPASS invalid username-password pair or user is disabled.")
	}
	return nil
}

// cmdHello: HELLO [protover [AUTH username password] [SETNAME clientname]].
func cmdHello(h *Handler, c *resp.Conn, args [][]byte) error {
	proto := c.Proto()
	if len(args) > 1 {
		v, err := parseInt(args[1])
		if err != nil {
			return replyError("ERR Protocol version is not an integer or out of range")
		}
		if v != 2 && v != 3 {
			return replyError("NOPROTO unsupported protocol version")
		}
		proto = int(v)
	}
	// Like Redis: check every option first, then authenticate, then apply.
	var name, creds [][]byte
	for i := 2; i < len(args); i++ {
		opt := strings.ToLower(string(args[i]))
		switch {
		case opt == "auth" && i+2 < len(args):
			creds = args[i+1 : i+3]
			i += 2
		case opt == "setname" && i+1 < len(args):
			if err := validName(args[i+1]); err != nil {
				return err
			}
			name = args[i+1 : i+2]
			i++
		default:
			return replyError(fmt.Sprintf("ERR Syntax error in HELLO option '%s'", clip(args[i], 128)))
		}
	}
	if creds != nil {
		if err := h.auth(c, creds); err != nil {
			return err
		}
	}
	if !c.Authed() {
		return replyError("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
	}
	if name != nil {
		c.SetName(string(name[0]))
	}
	c.SetProto(proto)
	c.WriteMap(8)
	c.WriteBulkString("server")
	c.WriteBulkString("leafd")
	c.WriteBulkString("version")
	c.WriteBulkString(RedisVersion)
	c.WriteBulkString("leafd_version")
	c.WriteBulkString(h.cfg.Version)
	c.WriteBulkString("proto")
	c.WriteInt(int64(proto))
	c.WriteBulkString("id")
	c.WriteInt(c.ID())
	c.WriteBulkString("mode")
	c.WriteBulkString("standalone")
	c.WriteBulkString("role")
	c.WriteBulkString("master")
	c.WriteBulkString("modules")
	c.WriteArray(0)
	return nil
}

func cmdReset(h *Handler, c *resp.Conn, args [][]byte) error {
	c.ResetState()
	c.SetState(nil) // leaves MULTI, turns tracking, NO-EVICT and NO-TOUCH off
	c.WriteSimple("RESET")
	return nil
}

func validName(name []byte) error {
	for _, b := range name {
		if b < '!' || b > '~' {
			return replyError("ERR Client names cannot contain spaces, newlines or special characters.")
		}
	}
	return nil
}

// clientSubcommands are the CLIENT subcommands leafd knows, for the arity error.
var clientSubcommands = map[string]bool{
	"id": true, "getname": true, "setname": true, "setinfo": true, "info": true, "help": true,
	"tracking": true, "caching": true, "getredir": true, "trackinginfo": true,
	"no-evict": true, "no-touch": true,
}

// cmdClient: CLIENT ID | SETNAME | GETNAME | SETINFO | INFO | HELP | TRACKING | CACHING |
// GETREDIR | TRACKINGINFO | NO-EVICT | NO-TOUCH (tracking.go).
func cmdClient(h *Handler, c *resp.Conn, args [][]byte) error {
	sub := strings.ToLower(string(args[1]))
	switch {
	case sub == "id" && len(args) == 2:
		c.WriteInt(c.ID())
	case sub == "getname" && len(args) == 2:
		if c.Name() == "" {
			c.WriteNull()
		} else {
			c.WriteBulkString(c.Name())
		}
	case sub == "setname" && len(args) == 3:
		if err := validName(args[2]); err != nil {
			return err
		}
		c.SetName(string(args[2]))
		c.WriteSimple("OK")
	case sub == "setinfo" && len(args) == 4:
		attr := strings.ToLower(string(args[2]))
		if attr != "lib-name" && attr != "lib-ver" {
			return replyError(fmt.Sprintf("ERR Unrecognized option '%s'", clip(args[2], 64)))
		}
		if err := validName(args[3]); err != nil {
			return replyError("ERR " + string(args[2]) + " cannot contain spaces, newlines or special characters.")
		}
		if attr == "lib-name" {
			c.SetLib(string(args[3]), "")
		} else {
			c.SetLib("", string(args[3]))
		}
		c.WriteSimple("OK")
	case sub == "info" && len(args) == 2:
		c.WriteVerbatim(clientLine(c, h))
	case sub == "help" && len(args) == 2:
		help := []string{
			"CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
			"ID", "    Return the ID of the current connection.",
			"GETNAME", "    Return the name of the current connection.",
			"SETNAME <name>", "    Assign the name <name> to the current connection.",
			"SETINFO <LIB-NAME|LIB-VER> <value>", "    Set client library name or version.",
			"INFO", "    Return information about the current client connection.",
			"TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]] [OPTIN] [OPTOUT] [NOLOOP]",
			"    Accepted and remembered; leafd has no readable keys, so nothing is ever invalidated.",
			"CACHING (YES|NO)", "    Accepted in OPTIN / OPTOUT tracking mode (no effect: see TRACKING).",
			"GETREDIR", "    Return the tracking redirect: -1 when tracking is off, 0 when none.",
			"TRACKINGINFO", "    Return the tracking flags, redirect and prefixes.",
			"NO-EVICT (ON|OFF)", "    Accepted (leafd evicts no clients for memory).",
			"NO-TOUCH (ON|OFF)", "    Accepted (leafd has no keys to touch).",
		}
		c.WriteArray(len(help))
		for _, l := range help {
			c.WriteSimple(l)
		}
	case sub == "tracking" && len(args) >= 3:
		return h.clientTracking(c, args)
	case sub == "caching" && len(args) == 3:
		return clientCaching(c, args[2])
	case sub == "getredir" && len(args) == 2:
		c.WriteInt(clientRedirect(c))
	case sub == "trackinginfo" && len(args) == 2:
		clientTrackingInfo(c)
	case sub == "no-evict" && len(args) == 3:
		st := state(c, true)
		if err := clientOnOff(args[2], &st.track.noEvict); err != nil {
			return err
		}
		c.WriteSimple("OK")
	case sub == "no-touch" && len(args) == 3:
		st := state(c, true)
		if err := clientOnOff(args[2], &st.track.noTouch); err != nil {
			return err
		}
		c.WriteSimple("OK")
	case clientSubcommands[sub]:
		return replyError("ERR wrong number of arguments for 'client|" + sub + "' command")
	default:
		return replyError(fmt.Sprintf("ERR unknown subcommand '%s'. Try CLIENT HELP.", clip(args[1], 128)))
	}
	return nil
}

func clientLine(c *resp.Conn, h *Handler) string {
	i := c.Info(h.now())
	return fmt.Sprintf("id=%d addr=%s laddr=%s name=%s age=%d idle=%d db=0 resp=%d lib-name=%s lib-ver=%s\n",
		i.ID, i.Addr, i.LocalAddr, i.Name, int64(i.Age.Seconds()), int64(i.Idle.Seconds()), i.Proto, i.LibName, i.LibVer)
}

// cmdCommand: COMMAND | COMMAND COUNT | COMMAND INFO name... | COMMAND DOCS [name...].
func cmdCommand(h *Handler, c *resp.Conn, args [][]byte) error {
	if len(args) == 1 {
		names := h.commandNames()
		c.WriteArray(len(names))
		for _, n := range names {
			h.writeCommandInfo(c, h.table[n])
		}
		return nil
	}
	switch strings.ToLower(string(args[1])) {
	case "count":
		c.WriteInt(int64(len(h.table)))
	case "info":
		if len(args) == 2 { // Redis: COMMAND INFO with no names describes every command
			names := h.commandNames()
			c.WriteArray(len(names))
			for _, n := range names {
				h.writeCommandInfo(c, h.table[n])
			}
			return nil
		}
		c.WriteArray(len(args) - 2)
		for _, a := range args[2:] {
			if cmd := h.lookup(a); cmd != nil {
				h.writeCommandInfo(c, cmd)
			} else {
				c.WriteNull()
			}
		}
	case "docs":
		var cmds []*command
		if len(args) == 2 {
			for _, n := range h.commandNames() {
				cmds = append(cmds, h.table[n])
			}
		} else {
			for _, a := range args[2:] {
				if cmd := h.lookup(a); cmd != nil {
					cmds = append(cmds, cmd)
				}
			}
		}
		c.WriteMap(len(cmds))
		for _, cmd := range cmds {
			c.WriteBulkString(cmd.name)
			c.WriteMap(3)
			c.WriteBulkString("summary")
			c.WriteBulkString(cmd.summary)
			c.WriteBulkString("since")
			c.WriteBulkString("1.0.0")
			c.WriteBulkString("group")
			c.WriteBulkString(cmd.group)
		}
	default:
		return replyError(fmt.Sprintf("ERR unknown subcommand '%s'. Try COMMAND HELP.", clip(args[1], 128)))
	}
	return nil
}

func (h *Handler) commandNames() []string {
	names := make([]string, 0, len(h.table))
	for n := range h.table {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// writeCommandInfo writes Redis's COMMAND INFO entry: name, arity, flags, first key, last key,
// step, ACL categories, tips, key specs, subcommands.
func (h *Handler) writeCommandInfo(c *resp.Conn, cmd *command) {
	c.WriteArray(10)
	c.WriteBulkString(cmd.name)
	c.WriteInt(int64(cmd.arity))
	c.WriteSet(1)
	c.WriteSimple("fast")
	first := int64(0)
	if cmd.group == "segment" && cmd.arity != 1 {
		first = 1 // the tag is the key, for cluster-aware clients
	}
	c.WriteInt(first)
	c.WriteInt(first)
	c.WriteInt(first)
	c.WriteSet(0)
	c.WriteSet(0)
	c.WriteArray(0)
	c.WriteArray(0)
}

// cmdConfig: CONFIG GET pattern [pattern ...]. redis-benchmark asks for "save" and
// "appendonly" before it starts.
func cmdConfig(h *Handler, c *resp.Conn, args [][]byte) error {
	sub := strings.ToLower(string(args[1]))
	if sub != "get" {
		return replyError(fmt.Sprintf("ERR unknown subcommand '%s'. Try CONFIG HELP.", clip(args[1], 128)))
	}
	if len(args) < 3 {
		return replyError("ERR wrong number of arguments for 'config|get' command")
	}
	keys := make([]string, 0, len(h.cfg.ConfigValues))
	for k := range h.cfg.ConfigValues {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var match []string
	for _, k := range keys {
		for _, p := range args[2:] {
			if ok, _ := path.Match(strings.ToLower(string(p)), k); ok {
				match = append(match, k)
				break
			}
		}
	}
	c.WriteMap(len(match))
	for _, k := range match {
		c.WriteBulkString(k)
		c.WriteBulkString(h.cfg.ConfigValues[k])
	}
	return nil
}

func cmdTime(h *Handler, c *resp.Conn, args [][]byte) error {
	now := h.now()
	c.WriteArray(2)
	var b [20]byte
	c.WriteBulk(strconv.AppendInt(b[:0], now.Unix(), 10))
	c.WriteBulk(strconv.AppendInt(b[:0], int64(now.Nanosecond()/1000), 10))
	return nil
}

// MayBlock tells the event-loop server (resp.Blocker) which commands wait and must run off
// the loop: AUTH and HELLO (a failed authentication waits for its turn, up to a second),
// IDS.CREATE (a store call, up to --create-timeout), and INCR, INCRBY and IDS.SEGMENT when
// their tag has no segment in memory with the values they need (they would wait for a load:
// a tag's first loads, or a switch the preload did not hide). Anything else that happens to
// wait is caught by the loop's watchdog, after 10-20 ms during which the loop's other
// connections stall.
func (h *Handler) MayBlock(args [][]byte) bool {
	name := args[0]
	switch len(name) {
	case 4:
		if len(args) == 2 && asciiEqualFold(name, "incr") {
			if e := h.shapeOf(str(args[1])); e != nil {
				return h.shapedMayBlock(e, 1)
			}
			return !h.seg.Serves(str(args[1]), 1)
		}
		return asciiEqualFold(name, "auth")
	case 5:
		return len(args) > 2 && asciiEqualFold(name, "hello")
	case 6:
		if len(args) == 3 && asciiEqualFold(name, "incrby") {
			n, err := parseInt(args[2])
			return err == nil && n >= 1 && !h.seg.Serves(str(args[1]), n)
		}
	case 8:
		// IDS.NEXT: the first request of a period creates the period's row (a store call),
		// a plain tag may wait for a load like IDS.SEGMENT.
		if asciiEqualFold(name, "ids.next") {
			return h.nextMayBlock(args)
		}
	case 9:
		return len(args) == 3 && (asciiEqualFold(name, "ids.prune") ||
			asciiEqualFold(name, "ids.parse") && h.shapeOf(str(args[1])) == nil)
	case 10:
		return asciiEqualFold(name, "ids.create")
	case 11:
		if (len(args) == 2 || len(args) == 3) && asciiEqualFold(name, "ids.segment") {
			n := int64(1)
			if len(args) == 3 {
				var err error
				if n, err = parseInt(args[2]); err != nil || n < 1 {
					return false
				}
			}
			return !h.seg.Serves(str(args[1]), n)
		}
	}
	return false
}

func asciiEqualFold(b []byte, lower string) bool {
	if len(b) != len(lower) {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != lower[i] {
			return false
		}
	}
	return true
}

var _ resp.Blocker = (*Handler)(nil)
