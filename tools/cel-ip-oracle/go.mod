module node-csr-approver/tools/cel-ip-oracle

go 1.26.0
