//go:build !unix

package corpus

import "errors"

func mkfifo(string) error { return errors.New("named pipes need a unix system") }
