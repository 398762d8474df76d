module node-csr-approver/tools/pause

go 1.26.0
