// The etcd server at the version go.mod pins: go.etcd.io/etcd/v3 (whose root is the
// etcd command) is not served by the module proxy, so this is that command's main.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
