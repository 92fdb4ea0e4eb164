package main

import (
	"bytes"
	"errors"
	"net"
	"strconv"
)

// Redis's own bounds on what a client sends (proto-max-bulk-len, and the
// 64 KB it takes of a line), past which it cuts the client as well.
const (
	maxCommandLine = 64 << 10
	maxBulkLen     = 512 << 20
)

var (
	errEmptyCommand = errors.New("embedded Redis: a command with no name (an empty or nil array); connection cut")
	errBulkTooLong  = errors.New("embedded Redis: a bulk string longer than 512 MB; connection cut")
	errLineTooLong  = errors.New("embedded Redis: a line longer than 64 KB; connection cut")
)

// checkedConn is a client's connection to the embedded Redis that cuts
// the client at a command miniredis would crash the whole process on (a
// panic in its goroutine of the connection, which nothing can recover):
// a command with no name, `*0\r\n` or `*-1\r\n` (four bytes from any
// client that reaches the port ended the service), or a bulk string whose
// length overflows what it allocates for it. Redis takes an empty
// command as nothing and refuses such a length; here both end the
// connection, as miniredis ends one at any other protocol error.
type checkedConn struct {
	net.Conn
	cut  func(error) // told of the cut, once, so that an operator can find the client
	scan commandScanner
	err  error // the cut's, returned by every Read from then on (the reader's alone)
}

func (c *checkedConn) Read(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.Conn.Read(b)
	if at, bad := c.scan.scan(b[:n]); bad != nil {
		// What came before the command is miniredis's to read (n with an
		// error, as io.Reader allows); the command itself, never.
		c.err = bad
		if c.cut != nil {
			c.cut(bad)
		}
		return at, bad
	}
	return n, err
}

// commandScanner follows what a client sends as miniredis reads it: each
// command an array (`*<n>\r\n`) of n elements, each a line (`+`, `-`, `:`)
// or a bulk string (`$<len>\r\n` and len bytes and CRLF), a length read
// from between a line's first byte and its last two, as miniredis does.
// Anything else miniredis refuses by closing the connection, so what the
// scanner makes of it does not matter.
type commandScanner struct {
	line []byte // the line read so far, of a read before
	args int    // the elements of the current command not yet read
	body int    // the bytes of a bulk string, with its CRLF, not yet read
}

// scan follows b, read after what scan followed before, and at the first
// command miniredis cannot take, returns why and where in b the line that
// says so begins (0 when it began in a read before).
func (s *commandScanner) scan(b []byte) (int, error) {
	for i := 0; i < len(b); {
		if s.body > 0 {
			k := min(s.body, len(b)-i)
			s.body -= k
			i += k
			continue
		}
		start := 0
		if len(s.line) == 0 {
			start = i
		}
		end := bytes.IndexByte(b[i:], '\n')
		if end < 0 {
			end = len(b) - i - 1
		}
		if len(s.line)+end+1 > maxCommandLine {
			return start, errLineTooLong
		}
		s.line = append(s.line, b[i:i+end+1]...)
		i += end + 1
		if s.line[len(s.line)-1] != '\n' {
			continue // the line goes on in the next read
		}
		err := s.take(s.line)
		s.line = s.line[:0]
		if err != nil {
			return start, err
		}
	}
	return 0, nil
}

// take reads one whole line.
func (s *commandScanner) take(line []byte) error {
	if len(line) < 3 {
		return nil // refused by miniredis
	}
	n, err := strconv.Atoi(string(line[1 : len(line)-2]))
	if s.args == 0 { // a command's header
		if line[0] == '*' && err == nil {
			if n <= 0 {
				return errEmptyCommand
			}
			s.args = n
		}
		return nil
	}
	s.args--
	if line[0] == '$' && err == nil {
		if n > maxBulkLen {
			return errBulkTooLong
		}
		if n >= 0 {
			s.body = n + 2
		}
	}
	return nil
}
