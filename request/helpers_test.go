package request

import "github.com/rowlease/rowlease/session"

func sessionConfigAutoCreate() session.Config { return session.Config{AutoCreate: true} }
