// Wrapper module: builds etcd (server) of one pinned release.
module delayq.local/etcdtools

go 1.26.0

require go.etcd.io/etcd/server/v3 v3.6.16
