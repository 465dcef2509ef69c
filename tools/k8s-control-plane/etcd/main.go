// etcd's server, built from go.etcd.io/etcd/server/v3 at the version go.mod pins: the
// same one-line main as etcd's own server/main.go (etcd's go.mod has replace directives,
// so `go install go.etcd.io/etcd/...@v` cannot build it).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
