package resp

import "bytes"

// Inline commands (a plain text line, as typed into telnet or nc) are split into arguments
// exactly as Redis's sdssplitargs splits them, so `ECHO "a b"` is two arguments and
// `INCR "foo` is a protocol error rather than a tag named `"foo`:
//
//   - arguments are separated by spaces, tabs, CR and LF; leading and trailing blanks
//     (also vertical tab and form feed) are skipped;
//   - "double quotes" take \xHH (two hex digits), \n \r \t \b \a, and a backslash before any
//     other byte stands for that byte;
//   - 'single quotes' take only \' as an escape; every other byte is literal;
//   - a quote may start in the middle of an argument (a"b c" is `ab c`), but a closing quote
//     must be followed by a blank or the end of the line;
//   - an unclosed quote, or a closing quote followed by something else, is an error
//     (ERR Protocol error: unbalanced quotes in request, then the connection is closed);
//   - a NUL byte ends the line (sdssplitargs reads a C string).

// errUnbalancedQuotes is Redis's reply to an inline line sdssplitargs refuses.
const errUnbalancedQuotes = "unbalanced quotes in request"

// splitInline appends the arguments of line to args. Plain arguments alias line; arguments
// with quotes are written into scratch, grown at most once per line, to len(line) (unquoting
// never lengthens an argument), and kept by the parser for the next line. It returns the
// arguments, the scratch buffer for reuse, and false when the quotes are unbalanced.
func splitInline(args [][]byte, line, scratch []byte) ([][]byte, []byte, bool) {
	if i := bytes.IndexByte(line, 0); i >= 0 {
		line = line[:i]
	}
	scratch = scratch[:0]
	n := len(line)
	i := 0
	for {
		for i < n && isBlank(line[i]) {
			i++
		}
		if i == n {
			return args, scratch, true
		}
		// Fast path: an argument without quotes is a slice of the line.
		j := i
		for j < n && !isSeparator(line[j]) && line[j] != '"' && line[j] != '\'' {
			j++
		}
		if j == n || isSeparator(line[j]) {
			args = append(args, line[i:j:j])
			i = j
			continue
		}
		if cap(scratch) < n {
			scratch = make([]byte, 0, n)
		}
		start := len(scratch)
		scratch = append(scratch, line[i:j]...)
		i = j
		var ok bool
		if scratch, i, ok = unquote(scratch, line, i); !ok {
			return args, scratch, false
		}
		args = append(args, scratch[start:len(scratch):len(scratch)])
	}
}

// unquote continues an argument at line[i], which is an opening quote or a byte after a
// closing one, up to its end. It appends the argument's bytes to dst and returns the offset
// just past the argument.
func unquote(dst, line []byte, i int) ([]byte, int, bool) {
	n := len(line)
	inDouble, inSingle := false, false
	for {
		switch {
		case inDouble:
			if i == n {
				return dst, i, false
			}
			c := line[i]
			switch {
			case c == '\\' && i+3 < n && line[i+1] == 'x' && isHex(line[i+2]) && isHex(line[i+3]):
				dst = append(dst, hexVal(line[i+2])<<4|hexVal(line[i+3]))
				i += 3
			case c == '\\' && i+1 < n:
				i++
				dst = append(dst, unescape(line[i]))
			case c == '"':
				if i+1 < n && !isBlank(line[i+1]) {
					return dst, i, false
				}
				return dst, i + 1, true
			default:
				dst = append(dst, c)
			}
		case inSingle:
			if i == n {
				return dst, i, false
			}
			c := line[i]
			switch {
			case c == '\\' && i+1 < n && line[i+1] == '\'':
				i++
				dst = append(dst, '\'')
			case c == '\'':
				if i+1 < n && !isBlank(line[i+1]) {
					return dst, i, false
				}
				return dst, i + 1, true
			default:
				dst = append(dst, c)
			}
		default:
			if i == n || isSeparator(line[i]) {
				return dst, i, true
			}
			switch c := line[i]; c {
			case '"':
				inDouble = true
			case '\'':
				inSingle = true
			default:
				dst = append(dst, c)
			}
		}
		i++
	}
}

// isBlank is C's isspace in the C locale: what sdssplitargs skips between arguments and
// accepts after a closing quote.
func isBlank(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

// isSeparator ends an unquoted argument (sdssplitargs: space, LF, CR, tab; not \v or \f).
func isSeparator(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hexVal(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'a':
		return '\a'
	}
	return c
}
