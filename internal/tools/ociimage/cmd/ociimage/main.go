// Command ociimage writes signet's container image as an OCI image layout
// from a static signet binary (package signet.dev/signet/internal/tools/ociimage)
// and prints the image digest. `make image` runs it.
//
// The creation time is -created (Unix seconds), else $SOURCE_DATE_EPOCH,
// else the Unix epoch, so that the same binary gives the same digest.
//
// Exit status: 0 with the digest on stdout, 1 when the image could not be
// built, 2 for bad flags.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"signet.dev/signet/internal/tools/ociimage"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		binary  = flag.String("binary", "bin/signet-linux-amd64", "static linux/amd64 signet binary")
		out     = flag.String("out", "bin/image", "OCI image layout directory to write")
		ref     = flag.String("ref", ociimage.DefaultRefName, "org.opencontainers.image.ref.name of the image in the layout")
		created = flag.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "creation time in Unix seconds (default $SOURCE_DATE_EPOCH, else 0)")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "ociimage: unexpected arguments %q\n", flag.Args())
		return 2
	}
	o := ociimage.Options{RefName: *ref}
	if *created != "" {
		secs, err := strconv.ParseInt(*created, 10, 64)
		if err != nil || secs < 0 {
			fmt.Fprintf(os.Stderr, "ociimage: -created: %q is not a non-negative number of Unix seconds\n", *created)
			return 2
		}
		o.Created = time.Unix(secs, 0)
	}
	digest, err := ociimage.Build(*binary, *out, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ociimage: %v\n", err)
		return 1
	}
	fmt.Println(digest)
	return 0
}
