package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
)

// apiError is an error answered with OpenAI's error object and an HTTP status.
type apiError struct {
	status  int
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
	// retryAfter, in seconds, is sent as Retry-After when positive (429, 503).
	retryAfter int
}

func (e *apiError) Error() string { return e.Message }

func strPtr(s string) *string { return &s }

// badRequest is a 400 about the request field param ("" when none applies).
func badRequest(param, format string, args ...any) *apiError {
	e := &apiError{status: http.StatusBadRequest, Message: fmt.Sprintf(format, args...), Type: "invalid_request_error"}
	if param != "" {
		e.Param = strPtr(param)
	}
	return e
}

func unauthorized() *apiError {
	return &apiError{status: http.StatusUnauthorized, Message: "Incorrect API key provided.", Type: "invalid_request_error",
		Code: strPtr("invalid_api_key")}
}

func modelNotFound(model string) *apiError {
	return &apiError{status: http.StatusNotFound, Message: fmt.Sprintf("The model `%s` does not exist.", model),
		Type: "invalid_request_error", Param: strPtr("model"), Code: strPtr("model_not_found")}
}

func notFound(path string) *apiError {
	return &apiError{status: http.StatusNotFound, Message: fmt.Sprintf("Unknown route %s.", path), Type: "invalid_request_error"}
}

func methodNotAllowed(method, path string) *apiError {
	return &apiError{status: http.StatusMethodNotAllowed, Message: fmt.Sprintf("Method %s not allowed on %s.", method, path),
		Type: "invalid_request_error"}
}

func tooLarge(limit int64) *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, Message: fmt.Sprintf("Request body exceeds %d bytes.", limit),
		Type: "invalid_request_error"}
}

func queueFull() *apiError {
	return &apiError{status: http.StatusTooManyRequests, Message: "The server's request queue is full; retry later.",
		Type: "rate_limit_error", Code: strPtr("queue_full"), retryAfter: 1}
}

func shuttingDown() *apiError {
	return &apiError{status: http.StatusServiceUnavailable, Message: "The server is shutting down.", Type: "server_error",
		Code: strPtr("shutting_down"), retryAfter: 5}
}

// modelLoading answers requests that arrive while the model loads (ServeLoading).
func modelLoading() *apiError {
	return &apiError{status: http.StatusServiceUnavailable, Message: "The model is loading; retry shortly.", Type: "server_error",
		Code: strPtr("model_loading"), retryAfter: 1}
}

func internalError(format string, args ...any) *apiError {
	return &apiError{status: http.StatusInternalServerError, Message: fmt.Sprintf(format, args...), Type: "server_error"}
}

// writeError answers with e as {"error": {...}}.
func writeError(w http.ResponseWriter, e *apiError) {
	if e.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(e.retryAfter))
	}
	writeJSON(w, e.status, struct {
		Error *apiError `json:"error"`
	}{e})
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		data = []byte(`{"error":{"message":"cannot encode the response","type":"server_error","param":null,"code":null}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)+1))
	w.WriteHeader(status)
	w.Write(append(data, '\n'))
}
