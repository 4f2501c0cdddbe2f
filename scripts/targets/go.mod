module gmpmon/targets

go 1.19
