package tiered

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// S3Config is how to reach an S3-compatible store.
type S3Config struct {
	// Endpoint is the store's URL (http or https), addressed path-style:
	// Endpoint/Bucket/key.
	Endpoint string
	// Bucket holds the objects; it must exist.
	Bucket string
	// Region signs the requests (most S3-compatible stores accept any;
	// default us-east-1).
	Region string
	// AccessKey and SecretKey are static credentials (the broker reads
	// AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY).
	AccessKey, SecretKey string
	// Timeout bounds each request (default 30 s).
	Timeout time.Duration
}

// S3 is a Store on an S3-compatible endpoint (aws-sdk-go-v2).
type S3 struct {
	client *s3.Client
	bucket string
}

// NewS3 returns the store cfg describes. It checks the settings, not the
// endpoint: the first request finds out whether it answers.
func NewS3(cfg S3Config) (*S3, error) {
	u, err := url.Parse(cfg.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("tiered: endpoint %q: give an http:// or https:// URL", cfg.Endpoint)
	}
	if cfg.Bucket == "" {
		return nil, errors.New("tiered: no bucket: give --remote-storage-bucket")
	}
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return nil, errors.New("tiered: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	client := s3.New(s3.Options{
		BaseEndpoint: aws.String(cfg.Endpoint),
		Region:       cfg.Region,
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, ""),
		HTTPClient:   &http.Client{Timeout: cfg.Timeout},
		// The uploader and the reads retry on their own schedule.
		RetryMaxAttempts: 1,
		// Checksums only where the API needs them: many S3-compatible
		// stores do not know the newer trailing checksums.
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
	return &S3{client: client, bucket: cfg.Bucket}, nil
}

// Put writes key (PutObject).
func (s *S3) Put(ctx context.Context, key string, body io.ReadSeeker, size int64) error {
	_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key), Body: body, ContentLength: aws.Int64(size),
	})
	if err != nil {
		return fmt.Errorf("tiered: put %s: %w", key, err)
	}
	return nil
}

// GetRange reads a byte range of key (GetObject with Range).
func (s *S3) GetRange(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if off < 0 || n <= 0 {
		return nil, fmt.Errorf("tiered: get %s: range %d+%d", key, off, n)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key),
		Range: aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)),
	})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("tiered: get %s: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("tiered: get %s: %w", key, err)
	}
	defer out.Body.Close()
	// Never more than asked, whatever the store sends.
	var buf bytes.Buffer
	buf.Grow(int(n))
	if _, err := io.Copy(&buf, io.LimitReader(out.Body, n)); err != nil {
		return nil, fmt.Errorf("tiered: get %s: %w", key, err)
	}
	return buf.Bytes(), nil
}

// Delete removes key (DeleteObject; S3 answers a missing key alike).
func (s *S3) Delete(ctx context.Context, key string) error {
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("tiered: delete %s: %w", key, err)
	}
	return nil
}

func isNotFound(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NoSuchKey", "NotFound", "404":
			return true
		}
	}
	return false
}
