module github.com/warden-sandbox/warden/sdk/go

go 1.26

require github.com/coder/websocket v1.8.15
