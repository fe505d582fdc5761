//go:build !unix

package gitobj

import "os"

// mapFile reads a file whole where mapping is not available.
func mapFile(name string) ([]byte, func() error, error) {
	data, err := os.ReadFile(name)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
