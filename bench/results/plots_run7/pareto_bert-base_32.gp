set terminal svg size 1200,600 dynamic background rgb 'white'
set output 'pareto_bert-base_32.svg'
set title 'bert-base, batch 32: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_bert-base_32.dat' index 0 using 3:2 with points pt 5 ps 1.6 title 'PyTorch eager (5442 MiB, 72.5 ms)', 'pareto_bert-base_32.dat' index 1 using 3:2 with points pt 5 ps 1.6 title 'PyTorch ckpt (2544 MiB, 104.5 ms)', 'pareto_bert-base_32.dat' index 2 using 3:2 with points pt 7 ps 1.6 title 'mutwo baseline (4913 MiB, 74.5 ms)', 'pareto_bert-base_32.dat' index 3 using 3:2 with points pt 7 ps 1.6 title 'mutwo baseline-cuda-graph (4913 MiB, 72.4 ms)', 'pareto_bert-base_32.dat' index 4 using 3:2 with points pt 7 ps 1.6 title 'mutwo per-layer (CUDA graph) (2217 MiB, 92.1 ms)', 'pareto_bert-base_32.dat' index 5 using 3:2 with points pt 7 ps 1.6 title 'mutwo per-layer-fresh-process (2177 MiB, 95.3 ms)', 'pareto_bert-base_32.dat' index 6 using 3:2 with points pt 7 ps 1.6 title 'mutwo mutwo (CUDA graph) (2217 MiB, 85.7 ms)', 'pareto_bert-base_32.dat' index 7 using 3:2 with points pt 7 ps 1.6 title 'mutwo mutwo-fresh-process (2177 MiB, 88.0 ms)'
set terminal pngcairo size 1200,600 background rgb 'white'
set output 'pareto_bert-base_32.png'
set title 'bert-base, batch 32: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_bert-base_32.dat' index 0 using 3:2 with points pt 5 ps 1.6 title 'PyTorch eager (5442 MiB, 72.5 ms)', 'pareto_bert-base_32.dat' index 1 using 3:2 with points pt 5 ps 1.6 title 'PyTorch ckpt (2544 MiB, 104.5 ms)', 'pareto_bert-base_32.dat' index 2 using 3:2 with points pt 7 ps 1.6 title 'mutwo baseline (4913 MiB, 74.5 ms)', 'pareto_bert-base_32.dat' index 3 using 3:2 with points pt 7 ps 1.6 title 'mutwo baseline-cuda-graph (4913 MiB, 72.4 ms)', 'pareto_bert-base_32.dat' index 4 using 3:2 with points pt 7 ps 1.6 title 'mutwo per-layer (CUDA graph) (2217 MiB, 92.1 ms)', 'pareto_bert-base_32.dat' index 5 using 3:2 with points pt 7 ps 1.6 title 'mutwo per-layer-fresh-process (2177 MiB, 95.3 ms)', 'pareto_bert-base_32.dat' index 6 using 3:2 with points pt 7 ps 1.6 title 'mutwo mutwo (CUDA graph) (2217 MiB, 85.7 ms)', 'pareto_bert-base_32.dat' index 7 using 3:2 with points pt 7 ps 1.6 title 'mutwo mutwo-fresh-process (2177 MiB, 88.0 ms)'
