package handlers_test

import (
	"net/http"

	"github.com/leafd/leafd/admin"
	"github.com/leafd/leafd/handlers"
	"go.uber.org/zap"
)

func init() {
	handlers.AdminHandler = func(h *handlers.Handler) http.Handler {
		return admin.New(admin.Config{}, h, zap.NewNop()).Handler()
	}
}
