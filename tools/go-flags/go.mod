module node-csr-approver/tools/go-flags

go 1.26.0
